"""Real tool definitions from tests/fixtures/data: BFCL (its own type dialect, mapped the way BFCL maps
it to JSON Schema) and MCP server tool lists."""

import json

from conftest import DATA


def _bfcl_types() -> dict:
    return json.loads((DATA / "bfcl" / "type_mapping_gorilla_to_openapi.json").read_text())


def bfcl_schema(node, types=None):
    """BFCL's parameter dialect ("dict", "float", "tuple", ...) as JSON Schema."""
    types = types or _bfcl_types()
    if isinstance(node, list):
        return [bfcl_schema(n, types) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "type" and isinstance(v, str):
            out[k] = types.get(v, v)
        elif k == "properties" and isinstance(v, dict):
            out[k] = {p: bfcl_schema(s, types) for p, s in v.items()}
        elif k in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            out[k] = bfcl_schema(v, types)
        elif k == "optional":
            continue
        else:
            out[k] = v
    return out


def bfcl_tools(category: str = "simple_python", limit: int = 10) -> list[dict]:
    """Distinct tools of a BFCL category, OpenAI-shaped."""
    path = DATA / "bfcl" / f"{category}.jsonl"
    types = _bfcl_types()
    out, seen = [], set()
    for line in path.read_text().splitlines():
        for f in json.loads(line).get("function", []):
            if f["name"] in seen:
                continue
            seen.add(f["name"])
            out.append({"type": "function", "function": {
                "name": f["name"], "description": f.get("description", ""),
                "parameters": bfcl_schema(f["parameters"], types)}})
            if len(out) >= limit:
                return out
    return out


def mcp_tools(limit: int = 42) -> list[dict]:
    path = DATA / "mcp_tools" / "tools.jsonl"
    out = []
    for line in path.read_text().splitlines()[:limit]:
        t = json.loads(line)["tool"]
        out.append({"type": "function", "function": {
            "name": t["name"], "description": t.get("description", ""), "parameters": t["inputSchema"]}})
    return out
