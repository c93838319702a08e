"""Every field of the endpoint and template models is shown by each management view, or the
view says why not (issue 46, item 0): a field added to a model without a place in each view
fails here. v1's shapes are the models' own (`EndpointRecord.to_json`, `runpod_template`:
RunPod's names over `TemplateSpec`), so only the views that rename are listed."""

from __future__ import annotations

import re

import pytest

from lockgate.manage import graphql
from lockgate.manage.v2 import endpoint_shape, template_shapes
from lockgate.models import EndpointSpec, TemplateSpec

NOT_SHOWN = "not in "


@pytest.mark.parametrize(
    ("view", "fields", "model"),
    [
        ("v2 endpoint", endpoint_shape.ENDPOINT_FIELDS, EndpointSpec),
        ("v2 endpoint's template", endpoint_shape.TEMPLATE_FIELDS, TemplateSpec),
        ("GraphQL endpoint", graphql.ENDPOINT_FIELDS, EndpointSpec),
    ],
)
def test_every_model_field_has_a_place_in_the_view_or_a_reason(
    view: str, fields: dict[str, str], model: type
) -> None:
    missing = set(model.model_fields) - set(fields)
    stale = set(fields) - set(model.model_fields)
    assert not missing, f"{view}: map or exclude {sorted(missing)}"
    assert not stale, f"{view}: no such model field {sorted(stale)}"


def test_the_v2_template_view_maps_or_excludes_every_template_field() -> None:
    shown = set(template_shapes.V2_FIELD_OF) | set(template_shapes.NOT_IN_V2)
    assert shown == set(TemplateSpec.model_fields)


def test_every_graphql_name_the_mapping_gives_is_in_the_schema() -> None:
    endpoint_type = re.search(r"type Endpoint \{(.*?)\}", graphql.SDL, re.S).group(1)
    names = set(re.findall(r"^\s*(\w+):", endpoint_type, re.M))
    mapped = {v for v in graphql.ENDPOINT_FIELDS.values() if not v.startswith(NOT_SHOWN)}
    assert mapped <= names, sorted(mapped - names)
