"""The recommender's feature-lookup form: online features, precomputed answers and the answer itself."""
