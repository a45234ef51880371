//! Typed Ignition (spec 3.3.0) and pure rendering of a Machine's install and
//! node configs from its MachineClass. Never imports `controller`.
