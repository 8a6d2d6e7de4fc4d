// What libclient/rust/README.md tells a dependent crate to do: kvpool's build script hands
// over the directory of libkvpool_c (links = "kvpool_c"), and this binary gets it as RUNPATH.
fn main() {
    if let Ok(dir) = std::env::var("DEP_KVPOOL_C_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}
