"""What ships beside the code: the long text of texts/ (with its licence), and reading text files users give."""
