"""The base every stage stands on: errors, tensor types, the registry mechanism, template
rendering, typed field coercion.  Imports nothing else of lmc."""
