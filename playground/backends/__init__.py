"""Generation backends: each turns a loaded model, prompt ids and a RunSpec into a stream of events."""
