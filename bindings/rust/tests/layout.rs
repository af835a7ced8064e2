//! The hand-written declarations of `llmrt::sys` against `bindings/abi_manifest.txt`, which
//! tests/abi/abi_manifest.c prints from the header with the C compiler: every constant's value,
//! every struct's size and alignment, every field's offset and size. A struct or field the
//! binding declares that the manifest lacks, or one the manifest has that the binding lacks, is
//! a failure too (the binding declares every struct of the header).

use std::collections::BTreeMap;
use std::path::PathBuf;

use llmrt::sys;

#[derive(Default)]
struct Manifest {
    consts: BTreeMap<String, i64>,
    structs: BTreeMap<String, (usize, usize)>,
    fields: BTreeMap<String, BTreeMap<String, (usize, usize)>>,
}

fn parse(text: &str) -> Manifest {
    let mut m = Manifest::default();
    for (n, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num =
            |s: &str| -> i64 { s.parse().unwrap_or_else(|_| panic!("manifest line {}: bad number {s:?}", n + 1)) };
        match words.as_slice() {
            [] => {}
            ["const", name, value] => {
                m.consts.insert(name.to_string(), num(value));
            }
            ["struct", name, "size", size, "align", align] => {
                m.structs.insert(name.to_string(), (num(size) as usize, num(align) as usize));
            }
            ["field", path, "offset", offset, "size", size] => {
                let (s, f) = path.split_once('.').unwrap_or_else(|| panic!("manifest line {}: {path:?}", n + 1));
                m.fields
                    .entry(s.to_string())
                    .or_default()
                    .insert(f.to_string(), (num(offset) as usize, num(size) as usize));
            }
            _ => panic!("manifest line {}: unrecognized {line:?}", n + 1),
        }
    }
    m
}

fn manifest() -> Manifest {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../abi_manifest.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let m = parse(&text);
    assert!(m.consts.len() > 50 && m.structs.len() >= 10, "{} looks truncated", path.display());
    m
}

#[test]
fn constants_match_the_header() {
    let problems = check_constants(&manifest());
    assert!(problems.is_empty(), "constants differ:\n{}", problems.join("\n"));
    assert_eq!(
        sys::LLMRT_VERSION_STRING,
        format!("{}.{}.{}", sys::LLMRT_VERSION_MAJOR, sys::LLMRT_VERSION_MINOR, sys::LLMRT_VERSION_PATCH)
    );
}

fn check_constants(m: &Manifest) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, value) in sys::CONSTANTS {
        match m.consts.get(*name) {
            Some(v) if v == value => {}
            Some(v) => problems.push(format!("{name}: binding {value}, header {v}")),
            None => problems.push(format!("{name}: declared by the binding, not in the header's manifest")),
        }
    }
    for name in m.consts.keys() {
        if !sys::CONSTANTS.iter().any(|(n, _)| n == name) {
            problems.push(format!("{name}: in the header, not declared by the binding"));
        }
    }
    problems
}

#[test]
fn structs_match_the_header() {
    let problems = check_structs(&manifest());
    assert!(problems.is_empty(), "layouts differ:\n{}", problems.join("\n"));
}

fn check_structs(m: &Manifest) -> Vec<String> {
    let layouts = sys::struct_layouts();
    let mut problems = Vec::new();
    for s in &layouts {
        let Some(&(size, align)) = m.structs.get(s.name) else {
            problems.push(format!("struct {}: declared by the binding, not in the header's manifest", s.name));
            continue;
        };
        if (s.size, s.align) != (size, align) {
            problems.push(format!(
                "struct {}: binding size {} align {}, header size {size} align {align}",
                s.name, s.size, s.align
            ));
        }
        let fields = m.fields.get(s.name).cloned().unwrap_or_default();
        for f in &s.fields {
            match fields.get(f.name) {
                Some(&(offset, fsize)) if (offset, fsize) == (f.offset, f.size) => {}
                Some(&(offset, fsize)) => problems.push(format!(
                    "{}.{}: binding offset {} size {}, header offset {offset} size {fsize}",
                    s.name, f.name, f.offset, f.size
                )),
                None => problems.push(format!("{}.{}: declared by the binding, not in the header", s.name, f.name)),
            }
        }
        for name in fields.keys() {
            if !s.fields.iter().any(|f| f.name == name) {
                problems.push(format!("{}.{name}: in the header, missing from the binding", s.name));
            }
        }
    }
    for name in m.structs.keys() {
        if !layouts.iter().any(|s| s.name == name) {
            problems.push(format!("struct {name}: in the header, not declared by the binding"));
        }
    }
    problems
}

#[test]
fn library_matches_the_declared_version() {
    // The loaded library is of the ABI major version the declarations were written for.
    assert_eq!(llmrt::version_number() / 1_000_000, sys::LLMRT_VERSION_MAJOR);
    assert_eq!(llmrt::version(), sys::LLMRT_VERSION_STRING);
}

#[test]
fn the_checks_catch_mismatches() {
    // The comparison is not vacuous: altered manifests are reported, each naming the culprit.
    let text = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../abi_manifest.txt")).unwrap();
    let moved =
        text.replace("field llm_step_result.token offset 16 size 4", "field llm_step_result.token offset 20 size 4");
    assert_ne!(moved, text, "the manifest has llm_step_result.token at offset 16");
    let problems = check_structs(&parse(&moved));
    assert!(problems.len() == 1 && problems[0].starts_with("llm_step_result.token:"), "{problems:?}");

    let grown = format!("{text}struct llm_future size 8 align 8\nfield llm_future.x offset 0 size 8\nfield llm_error.extra offset 1032 size 4\n");
    let problems = check_structs(&parse(&grown));
    assert!(problems.iter().any(|p| p.contains("llm_future: in the header, not declared")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("llm_error.extra: in the header, missing")), "{problems:?}");

    let without: String = text.lines().filter(|l| !l.contains("llm_kv_sizing")).map(|l| format!("{l}\n")).collect();
    let problems = check_structs(&parse(&without));
    assert!(
        problems.iter().any(|p| p.contains("struct llm_kv_sizing: declared by the binding, not in")),
        "{problems:?}"
    );

    let renumbered = text.replace("const LLM_ERR_CANCELLED 9", "const LLM_ERR_CANCELLED 90");
    let problems = check_constants(&parse(&renumbered));
    assert_eq!(problems, vec!["LLM_ERR_CANCELLED: binding 9, header 90".to_string()]);
}
