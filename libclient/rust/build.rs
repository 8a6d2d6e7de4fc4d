// Links libkvpool_c (the C ABI of kvpool.h), found in this order:
//   1. KVPOOL_C_LIB_DIR: the directory that holds libkvpool_c.so (a cmake build's
//      libclient/src/c_api, or an install's lib/);
//   2. pkg-config kvpool_c (the installed kvpool_c.pc; PKG_CONFIG_PATH for another prefix);
//   3. the linker's default paths (an install under /usr).
// The directory found goes into this crate's own binaries' RUNPATH (tests, examples), and to
// crates that depend on this one as DEP_KVPOOL_C_LIB_DIR (this crate `links = "kvpool_c"`):
// Cargo applies link arguments to the package that prints them only, so a downstream binary
// adds the RUNPATH in its own build.rs (see README.md), or the library sits in a system
// directory, or LD_LIBRARY_PATH names it.
use std::process::Command;

fn pkg_config_lib_dir() -> Option<String> {
    let out = Command::new("pkg-config")
        .args(["--libs-only-L", "kvpool_c"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout)
        .ok()?
        .split_whitespace()
        .find_map(|flag| flag.strip_prefix("-L").map(str::to_string))
}

fn main() {
    println!("cargo:rerun-if-env-changed=KVPOOL_C_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let dir = std::env::var("KVPOOL_C_LIB_DIR").ok().or_else(pkg_config_lib_dir);
    if let Some(dir) = dir {
        println!("cargo:rustc-link-search=native={}", dir);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
        println!("cargo:lib_dir={}", dir);
    }
    println!("cargo:rustc-link-lib=dylib=kvpool_c");
}
