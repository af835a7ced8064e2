//! Finds libllmrt and links it, with an rpath so that `cargo test` and `cargo run --example`
//! start without LD_LIBRARY_PATH.
//!
//! Where the library comes from, first match wins:
//!  1. LLMRT_LIB_DIR: a directory holding libllmrt.so;
//!  2. pkg-config's `llmrt` package (llmrt.pc, installed by `cmake --install`; PKG_CONFIG_PATH
//!     points at `<prefix>/lib/pkgconfig` for a prefix outside the system's search path).
//!
//! No external crates: pkg-config is run as a program.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-env-changed=LLMRT_LIB_DIR");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo::rerun-if-changed=build.rs");

    let lib_dir = match env::var_os("LLMRT_LIB_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if !dir.join("libllmrt.so").exists() {
                fail(&format!(
                    "LLMRT_LIB_DIR={} holds no libllmrt.so (set it to the directory of the installed library, \
                     e.g. <prefix>/lib)",
                    dir.display()
                ));
            }
            dir
        }
        _ => from_pkg_config(),
    };
    let lib_dir = lib_dir.canonicalize().unwrap_or(lib_dir);
    println!("cargo::rustc-link-search=native={}", lib_dir.display());
    println!("cargo::rustc-link-lib=dylib=llmrt");
    // The rpath applies to this package's own tests, examples and binaries; a dependent crate
    // reads the directory from DEP_LLMRT_LIBDIR in its build script to set its own.
    println!("cargo::rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    println!("cargo::metadata=libdir={}", lib_dir.display());
}

fn from_pkg_config() -> PathBuf {
    let out = Command::new("pkg-config").args(["--libs-only-L", "llmrt"]).output();
    let out = match out {
        Ok(out) => out,
        Err(e) => fail(&format!(
            "could not run pkg-config ({e}); install it, or set LLMRT_LIB_DIR to the directory holding libllmrt.so"
        )),
    };
    if !out.status.success() {
        fail(&format!(
            "pkg-config found no llmrt package: {}\nset PKG_CONFIG_PATH=<prefix>/lib/pkgconfig for an llmrt installed \
             with `cmake --install build --prefix <prefix>`, or set LLMRT_LIB_DIR",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let flags = String::from_utf8_lossy(&out.stdout);
    for flag in flags.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            if Path::new(dir).join("libllmrt.so").exists() {
                return PathBuf::from(dir);
            }
        }
    }
    fail(&format!("pkg-config's llmrt flags `{}` name no directory holding libllmrt.so", flags.trim()))
}

fn fail(message: &str) -> ! {
    eprintln!("llmrt build: {message}");
    std::process::exit(1);
}
