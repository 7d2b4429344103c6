"""The component package's plugin process: the SDK's component provider over this package's components, refusing
an input key the schema does not have before anything is constructed.

The SDK's provider copies only the schema's properties into a component's args, so a misspelt key sent over
gRPC (`queue.retry.maxRetrys: 4`, `protectQueue: true`) never reaches the components' own strict check and is
silently dropped: the queue deploys as if the key were absent. Typed SDKs refuse most such keys at compile time,
but raw inputs (Pulumi YAML, an untyped object in TypeScript, any program over the engine's gRPC) do not pass
through them. Here every key of the inputs, at every depth the schema describes, is checked first; an unknown
one fails the Construct naming its path and the closest known key, as the Python call's ConfigError does."""

import importlib
from collections.abc import Mapping
from typing import Any

from pulumi import ResourceOptions
from pulumi.errors import InputPropertiesError, InputPropertyErrorDetails
from pulumi.provider import ConstructResult
from pulumi.provider.experimental import host
from pulumi.provider.experimental.analyzer import PropertyDefinition
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.server import main

from ..model.fields import did_you_mean
from ..model.key_paths import entry_labels
from .foreign import python_name

PACKAGE = "rabbitmq-retry"


class StrictComponentProvider(ComponentProvider):
    """ComponentProvider whose Construct refuses input keys outside the component's schema."""

    def construct(self, name: str, resource_type: str, inputs: Mapping[str, Any],
                  options: ResourceOptions | None = None) -> ConstructResult:
        self.validate_resource_type(self._name, resource_type)
        component = resource_type.rsplit(":", maxsplit=1)[-1]
        errors = self.unknown_keys(inputs, self._component_defs[component].inputs, "")
        if errors:
            listed = "; ".join(f"{error['property_path']}: {error['reason']}" for error in errors)
            raise InputPropertiesError(f"{component}({name}): {listed}", errors)
        return super().construct(name, resource_type, inputs, options)

    def unknown_keys(self, value: Any, properties: Mapping[str, PropertyDefinition],
                     path: str) -> list[InputPropertyErrorDetails]:
        """Every key of `value` (an object of the schema's `properties`) the schema lacks, nested ones included.
        A value that is not a plain mapping (an Output, an unknown in a preview) has no keys to check."""
        if not isinstance(value, Mapping):
            return []
        errors: list[InputPropertyErrorDetails] = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            prop = properties.get(key)
            if prop is None:
                guess = did_you_mean(key, list(properties))
                errors.append({"property_path": where, "reason": f"unknown key{';' + guess if guess else ''} "
                                                                 f"(allowed: {', '.join(properties)})"})
            else:
                errors += self._unknown_nested(item, prop, where)
        return errors

    def _unknown_nested(self, value: Any, prop: PropertyDefinition, path: str) -> list[InputPropertyErrorDetails]:
        """The unknown keys inside one property's value: an object of a type of ours, or a list or map of them."""
        if prop.ref:
            type_def = self.get_type_definition(prop)
            return self.unknown_keys(value, type_def.properties, path) if type_def and not type_def.enum else []
        if prop.items and isinstance(value, list):
            labels = entry_labels(python_name(path.rpartition(".")[2]), value)
            return [error for label, item in zip(labels, value, strict=True)
                    for error in self._unknown_nested(item, prop.items, f"{path}{label}")]
        if prop.additional_properties and isinstance(value, Mapping):
            return [error for key, item in value.items()
                    for error in self._unknown_nested(item, prop.additional_properties, f"{path}.{key}")]
        return []


def serve(args: list[str]) -> None:
    """Serve every component of this package over gRPC, as `python -m pulumi.run.plugin rabbitmq-retry` would
    (same module walk, same version 0.0.0 when none is given), with the strict Construct above. `is_hosting`
    tells the components they build for another language (`foreign.hosted`), as the SDK's host sets it."""
    package = importlib.import_module((__package__ or "rabbitmq_retry.pulumi").rpartition(".")[0])
    host.is_hosting = True
    main(StrictComponentProvider(host.components_from_module(package), PACKAGE), args)
