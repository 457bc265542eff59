"""The long-running loops: the hot-plug watcher and the dest_free guard."""
