"""The long-context measure (the `context` command and the page's Long context tab): what each cache costs and
loses as the context grows. measure.py (options, refusals, the table, the run), request.py (a request read and
refused), text.py (the text as tokens), speed.py (speed per length against the roofline), quality.py
(teacher-forced quality against the full cache)."""
