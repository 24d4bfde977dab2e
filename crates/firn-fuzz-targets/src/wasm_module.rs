//! A function's module as the node checks it before it stores it (`FUNCTION LOAD`,
//! `PUT /v1/functions/{name}`): parsed and validated by wasmi, its exports and imports
//! checked against the sandbox's, and instantiated once with the run's fuel (a start
//! function runs).

use std::sync::OnceLock;

use firn_node::functions::sandbox::Sandbox;

pub fn wasm_module(data: &[u8]) {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    let sandbox = SANDBOX.get_or_init(|| Sandbox::new().expect("the sandbox's host calls"));
    let _ = sandbox.compile(data);
}
