"""Local infrastructure: fetching and running Kafka and Redis, topic provisioning."""
