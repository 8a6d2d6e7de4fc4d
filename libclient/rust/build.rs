// Links libkvpool_c (the C ABI of kvpool.h). KVPOOL_C_LIB_DIR names the directory that holds
// libkvpool_c.so (a cmake build's libclient/src/c_api, or an install's lib/); without it the
// linker's default paths are searched (an install under /usr). The directory also goes into
// the binaries' RUNPATH, so `cargo test` runs without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=KVPOOL_C_LIB_DIR");
    if let Ok(dir) = std::env::var("KVPOOL_C_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
    println!("cargo:rustc-link-lib=dylib=kvpool_c");
}
