"""Dev mode: embedded Redis, local worker pool and the one-process runner."""
