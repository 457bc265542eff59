"""The shipped alert rules and Grafana dashboard (copies of the repository's monitoring/; ``make monitoring``)."""
