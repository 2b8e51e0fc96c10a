"""The decoding strategies' plug-ins of the request loop and their device functions."""
