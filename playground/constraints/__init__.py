"""Constrained decoding: a regex, a JSON schema, a list of choices or a Lark grammar that the output must match,
enforced by llguidance's token masks (grammar.py builds and checks the grammar; verdict.py judges an output)."""
