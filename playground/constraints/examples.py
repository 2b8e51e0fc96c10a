"""One request under each kind of constraint: a fictional person as JSON, free, under a JSON schema and under a
regex. The page's preset shows them side by side and the constraint benchmark times them."""

PERSON_PROMPT = "Describe a fictional person as JSON with the fields name, age and city."
PERSON_SCHEMA = ('{"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, '
                 '"age": {"type": "integer", "minimum": 0, "maximum": 120}, "city": {"type": "string", '
                 '"maxLength": 40}}, "required": ["name", "age", "city"], "additionalProperties": false}')
# the same object, its shape fixed by a regex and one field's values narrowed: an age of one or two digits
PERSON_REGEX = r'\{"name": "[A-Z][a-z]+( [A-Z][a-z]+)?", "age": [1-9][0-9]?, "city": "[A-Z][a-z]+"\}'
