"""The serving engine's host KV pool: planned from the projected node (:mod:`.plan`) and verified
against where the engine's memory really is (:mod:`.verify`)."""
