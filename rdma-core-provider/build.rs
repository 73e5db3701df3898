//! Bindings for the public libibverbs API (`infiniband/verbs.h`) and the kernel's uverbs uapi
//! (`rdma/ib_user_verbs.h`). libibverbs' private structs are not installable on Debian 12; they
//! are declared by hand in `src/ffi/private.rs` and pinned by layout tests.

fn main() {
    println!("cargo:rerun-if-changed=src/ffi/wrapper.h");
    println!("cargo:rustc-link-lib=ibverbs");
    let bindings = bindgen::Builder::default()
        .header("src/ffi/wrapper.h")
        .allowlist_type("ibv_.*|verbs_context|verbs_ex_private|ib_uverbs_.*")
        .allowlist_function("ibv_.*")
        .allowlist_var("IBV_.*|IB_UVERBS_.*|IB_USER_VERBS_.*")
        // Functions libibverbs only exports at IBVERBS_PRIVATE_34: declared in private.rs.
        .blocklist_function("ibv_cmd_.*|verbs_.*|_verbs_.*")
        .derive_default(true)
        .prepend_enum_name(false)
        .layout_tests(true)
        .generate()
        .expect("bindgen over infiniband/verbs.h failed (is libibverbs-dev installed?)");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("verbs.rs");
    bindings.write_to_file(out).expect("writing verbs.rs");
}
