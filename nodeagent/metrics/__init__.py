"""Metrics: the collector both outputs share (HTTP exporter and node_exporter textfile), its families and formats."""
