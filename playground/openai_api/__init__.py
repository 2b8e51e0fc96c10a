"""An OpenAI-compatible API (completions, chat completions, models) over the playground's runner: the same
queue, generation slot and memory budget as the page, every RunSpec knob as an extra body field (docs/api.md)."""
