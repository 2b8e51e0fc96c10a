"""PlaygroundError: the one exception whose message is shown to users as is (CLI exit 2, gr.Error in the UI)."""


class PlaygroundError(ValueError):
    """Bad input or an impossible request; the message says what is wrong and what is allowed."""

    def __init__(self, message: str) -> None:
        # one line, so the CLI's "error: ..." and the UI's toast stay readable
        super().__init__(" ".join(str(message).split()))
