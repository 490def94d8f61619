"""Cost models: seconds per pass."""
