// Filled in by the runtime wiring; see connectors/registry.h.
