"""One Lark file per model family's tool-call syntax, installed as the package ``engine.grammars``
(see pyproject.toml) and read by ``engine.tools.formats`` through importlib.resources."""
