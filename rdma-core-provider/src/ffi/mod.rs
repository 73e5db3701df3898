//! Everything C: public libibverbs bindings (bindgen) and the private provider ABI (by hand).

pub mod private;
pub mod verbs;
