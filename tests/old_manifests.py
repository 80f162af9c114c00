"""fastmace-oeq-ext manifests as earlier schemas wrote them, for the tests of both tiers that the runtime still reads
them and the gate refuses to ship them."""
import json

from fastmace_oeq_ext import manifest as mf


def as_schema_3(text: str) -> dict:
    """The manifest `text` (schema 4) as schema 3 wrote it (post4 as built): each field, plus every derived fact and
    every twin under its second name."""
    m = mf.Manifest.from_json(text)
    data = json.loads(text)
    data.update(schema=3, **{k: getattr(m, k) for k in mf.DERIVED},
                **{old: getattr(m, new) for old, new in mf.SCHEMA3_TWINS.items()})
    return data
