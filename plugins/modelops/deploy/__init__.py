"""What the production topology (docker-compose.yml) runs before its services start."""
