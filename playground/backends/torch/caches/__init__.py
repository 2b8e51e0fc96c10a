"""Our own transformers Cache classes (sliding over any model, attention sinks) and the cache a run builds."""
