"""Day-2 views of a node built from the engine's records: status and the owned schemes' statistics."""
