"""Each built-in strategy's own records as the Result holds them, and how a backend's output becomes them: one
module per strategy (the beam strategies share theirs).

The registry's entries name these builders (`TokenRecords.build`, `RunRecords.build`); result.py calls the running
strategy's and knows none of them. The keys they land at are a contract (docs/api.md): `tokens[i].contrastive`,
`tokens[i].dola`, `tokens[i].draft`, `beam_tree` and `assisted_steps`.
"""
