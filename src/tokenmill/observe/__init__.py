"""A run in the operator's own tools: the Grafana board, the Prometheus rules and scrape config, the live page."""
