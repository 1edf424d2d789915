//! Architecture rules of docs/ARCHITECTURE.md, checked over the sources of every crate of the
//! workspace (every directory with a `Cargo.toml` and a `src/`): no module import cycle; no
//! source file over 600 lines outside tests and the two compute kernels; the learner's library
//! in wings (at most 8 files at the top of `learner/src` beside its folders); and `fused`
//! naming one thing, the recurrent kernels of `rnn/src/backend/fused/`.
//!
//! `RECUR_ARCHITECTURE_ROOT` points the checks at another checkout (e.g. an old commit
//! unpacked with `git archive`) instead of this one.
//!
//! # The module graph
//! Every `src/**/*.rs` file is a module: `src/lib.rs` the library's root, `src/a/b.rs` and
//! `src/a/b/mod.rs` module `a::b`; `src/main.rs` and `src/bin/*.rs` are roots of crates of their
//! own. A module declared inline (`mod x86 { .. }`) belongs to its file.
//!
//! A file refers to a module through a `use` declaration or a qualified path in code
//! (`crate::a::b::f(..)`, `super::x::Y`, `self::c::Z`, `child::W`, and `alias::V` after
//! `use crate::a as alias`): the deepest module the path names, `crate::envs::registry` for
//! `crate::envs::registry::Registry`. Comments, strings and `#[cfg(test)]` items do not count,
//! nor do other crates' paths (`std::`, `burn::`, `common::` from the learner).
//!
//! The rules that decide what is a cycle:
//! - **A re-export is a face.** A path through a parent's `pub use` (`crate::envs::EnvSpec`)
//!   names the parent module, not the file behind the re-export: the importer depends on the
//!   parent's public face, which may move the item without it noticing.
//! - **Parent and child are one unit.** A file makes no edge to its ancestors' files nor to its
//!   descendants': a parent declares its children (`mod child;`), re-exports and dispatches to
//!   them, and a child builds on the items its parent holds for it (`super::Segments`,
//!   `super::EnvError`). So `super::Item` from a child to its parent's own items does not count.
//! - Anything else is an edge: between siblings (`super::registry::EnvSpec` from
//!   `envs/gymnasium.rs`), cousins, or across directories (`crate::shm::ring::..`).
//!
//! A cycle is a strongly connected component of more than one file: two siblings that import
//! each other, or a longer loop. The shared item then wants its own home.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a source file may be, counted up to its trailing `#[cfg(test)] mod tests`.
const MAX_LINES: usize = 600;

/// Hand-written compute kernels, exempt from [`MAX_LINES`]: each is one concept whose length is
/// its unrolled cases.
const KERNELS: &[&str] = &[
    "rnn/src/backend/fused/kernel.rs",
    "rnn/src/backend/cube/kernel.rs",
];

/// The most `.rs` files at the top of `learner/src` (`lib.rs` included) beside its folders: the
/// commands sit there, everything else in a wing (`algo/`, `actors/`, `run/`, `config/`, ...).
const LEARNER_TOP_LEVEL_FILES: usize = 8;

/// Where the word `fused` may name a file or folder: the recurrent kernels, nothing else (PPO's
/// update over one flat buffer is `algo/ppo/flat/`).
const FUSED_HOME: &str = "rnn/src/backend/fused";

#[test]
fn no_module_import_cycles() {
    let root = workspace_root();
    let files = read_sources(&root);
    assert!(
        files.len() > 50,
        "read only {} source files under {}",
        files.len(),
        root.display()
    );
    let cycles = module_cycles(&files);
    assert!(
        cycles.is_empty(),
        "module import cycles (the shared item wants its own file; docs/ARCHITECTURE.md):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn no_source_file_over_600_lines() {
    let root = workspace_root();
    let files = read_sources(&root);
    for kernel in KERNELS {
        assert!(
            files.iter().any(|f| f.path == *kernel),
            "the exempt kernel {kernel} does not exist (moved? update KERNELS)"
        );
    }
    let over: Vec<String> = files
        .iter()
        .filter(|f| !KERNELS.contains(&f.path.as_str()))
        .filter_map(|f| {
            let n = non_test_lines(&f.text);
            (n > MAX_LINES).then(|| format!("  {}: {n} lines", f.path))
        })
        .collect();
    assert!(
        over.is_empty(),
        "source files over {MAX_LINES} lines before their tests (split them by job; only the \
         compute kernels are exempt: {KERNELS:?}):\n{}",
        over.join("\n")
    );
}

#[test]
fn the_learner_keeps_its_wings() {
    let files = read_sources(&workspace_root());
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let top = top_level_files(&paths, "learner/src");
    assert!(
        top.contains(&"learner/src/lib.rs".to_string()),
        "learner/src/lib.rs not found among {} sources",
        paths.len()
    );
    assert!(
        top.len() <= LEARNER_TOP_LEVEL_FILES,
        "learner/src has {} files beside its folders, at most {LEARNER_TOP_LEVEL_FILES} \
         (the commands; the rest belongs in a wing: algo/, actors/, run/, config/):\n  {}",
        top.len(),
        top.join("\n  ")
    );
}

#[test]
fn fused_names_the_recurrent_kernels_only() {
    let files = read_sources(&workspace_root());
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert!(
        paths.iter().any(|p| p.starts_with(FUSED_HOME)),
        "no source under {FUSED_HOME} (moved? update FUSED_HOME)"
    );
    let stray = stray_fused(&paths);
    assert!(
        stray.is_empty(),
        "`fused` names the recurrent kernels ({FUSED_HOME}) and nothing else; found:\n  {}",
        stray.join("\n  ")
    );
    let modules: Vec<String> = files
        .iter()
        .filter(|f| !f.path.starts_with("rnn/src/backend/"))
        .filter(|f| {
            // `mod fused`, `pub mod fused_x`, `pub(crate) mod fused { .. }`: any visibility.
            String::from_iter(strip(&f.text)).lines().any(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                words
                    .windows(2)
                    .any(|w| w[0] == "mod" && w[1].starts_with("fused"))
            })
        })
        .map(|f| f.path.clone())
        .collect();
    assert!(
        modules.is_empty(),
        "an inline or declared `mod fused` outside {FUSED_HOME}: {modules:?}"
    );
}

/// The `.rs` files directly in `dir` (not in its subfolders).
fn top_level_files(paths: &[&str], dir: &str) -> Vec<String> {
    let prefix = format!("{dir}/");
    paths
        .iter()
        .filter_map(|p| p.strip_prefix(&prefix))
        .filter(|rest| !rest.contains('/'))
        .map(|rest| format!("{prefix}{rest}"))
        .collect()
}

/// Paths with a folder or file named `fused` (or `fused.rs`, `fused_*`) outside [`FUSED_HOME`].
fn stray_fused(paths: &[&str]) -> Vec<String> {
    paths
        .iter()
        .filter(|p| !p.starts_with(&format!("{FUSED_HOME}/")))
        .filter(|p| {
            p.split('/').any(|part| {
                let stem = part.strip_suffix(".rs").unwrap_or(part);
                stem == "fused" || stem.starts_with("fused_")
            })
        })
        .map(|p| p.to_string())
        .collect()
}

/// The checkout to check: `RECUR_ARCHITECTURE_ROOT`, or this workspace.
fn workspace_root() -> PathBuf {
    match std::env::var_os("RECUR_ARCHITECTURE_ROOT") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("tests/ has a parent")
            .to_path_buf(),
    }
}

/// One source file: its path relative to the workspace (`common/src/envs/mod.rs`) and text.
#[derive(Clone, Debug)]
struct Source {
    path: String,
    text: String,
}

/// Every `src/**/*.rs` of every crate directory (one with `Cargo.toml` and `src/`) under `root`.
fn read_sources(root: &Path) -> Vec<Source> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("reading the workspace {}: {e}", root.display()));
    let mut crates: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir())
        .collect();
    crates.sort();
    for dir in crates {
        let mut files = Vec::new();
        walk(&dir.join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
            let rel = file.strip_prefix(root).expect("under the root");
            out.push(Source {
                path: rel.to_string_lossy().replace('\\', "/"),
                text,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Lines before a trailing `#[cfg(test)]` + `mod tests` block (all lines without one).
fn non_test_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if *line != "#[cfg(test)]" {
            continue;
        }
        let next = lines[i + 1..].iter().find(|l| !l.trim().is_empty());
        if next.is_some_and(|l| l.starts_with("mod tests")) {
            return i;
        }
    }
    lines.len()
}

// ---------------------------------------------------------------------------------------------
// Lexing

/// `text` with comments, string and char literals blanked (newlines kept, so lines still count).
fn strip(text: &str) -> Vec<char> {
    let c: Vec<char> = text.chars().collect();
    let mut out = c.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for ch in &mut out[from..to.min(c.len())] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
    };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            let end = c[i..]
                .iter()
                .position(|&x| x == '\n')
                .map_or(c.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !prev_ident && raw_string_start(&c, i).is_some() {
            let (quote, hashes) = raw_string_start(&c, i).expect("checked");
            let mut j = quote + 1;
            while j < c.len() {
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c[i] == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if c.get(i + 1) == Some(&'\\') {
                let mut j = i + 2;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                blank(&mut out, i, j + 1);
                i = j + 1;
            } else if c.get(i + 2) == Some(&'\'') {
                blank(&mut out, i, i + 3);
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// At `r"`, `r#"`, `br#"`, ...: the index of the opening quote and the number of hashes.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if c.get(j) == Some(&'b') || c.get(j) == Some(&'c') {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&x| x == '#').count();
    (c.get(j + hashes) == Some(&'"')).then_some((j + hashes, hashes))
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// An identifier or keyword (`$crate` included).
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// The tokens of stripped code, each with its line (1-based).
fn tokens(code: &[char]) -> Vec<(Tok, usize)> {
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < code.len() {
        let ch = code[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphabetic()
            || ch == '_'
            || (ch == '$' && code.get(i + 1).is_some_and(|c| c.is_alphabetic()))
        {
            let start = i;
            i += 1;
            while i < code.len() && (code[i].is_alphanumeric() || code[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(code[start..i].iter().collect()), line));
        } else if ch.is_ascii_digit() {
            while i < code.len() && (code[i].is_alphanumeric() || code[i] == '_') {
                i += 1;
            }
        } else if ch == ':' && code.get(i + 1) == Some(&':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// What each file declares and refers to

/// A path a file refers to, as written (`super`, `crate`, ... included).
#[derive(Clone, Debug)]
struct Reference {
    /// The module (inline modules included) the path is written in.
    scope: Vec<String>,
    segments: Vec<String>,
    line: usize,
}

/// One `use` binding: `name` stands for `target` (as written) in module `scope`.
#[derive(Clone, Debug)]
struct Binding {
    scope: Vec<String>,
    name: String,
    target: Vec<String>,
}

#[derive(Default, Debug)]
struct Parsed {
    /// Inline modules (`mod x { .. }`), by path.
    inline: BTreeSet<Vec<String>>,
    bindings: Vec<Binding>,
    references: Vec<Reference>,
}

/// Reads the inline modules, `use` bindings and references of a file whose module is `module`.
fn parse(text: &str, module: &[String]) -> Parsed {
    let toks = tokens(&strip(text));
    let mut p = Parsed::default();
    // The module stack: (path, brace depth inside its block).
    let mut scopes: Vec<(Vec<String>, usize)> = vec![(module.to_vec(), 0)];
    let mut depth = 0usize;
    let mut i = 0;
    let ident = |i: usize| match toks.get(i) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    let punct = |i: usize, c: char| matches!(toks.get(i), Some((Tok::Punct(x), _)) if *x == c);
    while i < toks.len() {
        let scope = scopes.last().expect("the file's module").0.clone();
        // #[cfg(test)]: skip the item it guards.
        if punct(i, '#')
            && punct(i + 1, '[')
            && ident(i + 2) == Some("cfg")
            && punct(i + 3, '(')
            && ident(i + 4) == Some("test")
            && punct(i + 5, ')')
            && punct(i + 6, ']')
        {
            i = skip_item(&toks, i + 7);
            continue;
        }
        match &toks[i].0 {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if scopes.len() > 1 && depth < scopes.last().expect("nonempty").1 {
                    scopes.pop();
                }
                i += 1;
            }
            Tok::Ident(kw) if kw == "use" => {
                let line = toks[i].1;
                let (trees, end) = use_tree(&toks, i + 1);
                for (path, name) in trees {
                    if let Some(name) = name {
                        p.bindings.push(Binding {
                            scope: scope.clone(),
                            name,
                            target: path.clone(),
                        });
                    }
                    p.references.push(Reference {
                        scope: scope.clone(),
                        segments: path,
                        line,
                    });
                }
                i = end;
            }
            Tok::Ident(kw) if kw == "mod" && ident(i + 1).is_some() => {
                let name = ident(i + 1).expect("checked").to_string();
                if punct(i + 2, '{') {
                    let mut inner = scope.clone();
                    inner.push(name);
                    p.inline.insert(inner.clone());
                    depth += 1;
                    scopes.push((inner, depth));
                    i += 3;
                } else {
                    i += 2; // `mod child;`: a declaration, not a use
                }
            }
            Tok::Ident(first) => {
                // A qualified path: first::a::b (not the tail of another path).
                let after_path = i > 0 && toks[i - 1].0 == Tok::Path;
                let mut segments = vec![first.clone()];
                let mut j = i + 1;
                while toks.get(j).map(|t| &t.0) == Some(&Tok::Path) {
                    match ident(j + 1) {
                        Some(s) => segments.push(s.to_string()),
                        None => break,
                    }
                    j += 2;
                }
                if segments.len() > 1 && !after_path {
                    p.references.push(Reference {
                        scope: scope.clone(),
                        segments,
                        line: toks[i].1,
                    });
                }
                i = j.max(i + 1);
            }
            _ => i += 1,
        }
    }
    p
}

/// Skips one item (after its attributes): up to its `;` or `,`, or to the end of its first
/// `{ .. }` block. Stops before a `}` that closes the enclosing block.
fn skip_item(toks: &[(Tok, usize)], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < toks.len() {
        match toks[i].0 {
            Tok::Punct('(') | Tok::Punct('[') => depth += 1,
            Tok::Punct(')') | Tok::Punct(']') => depth = depth.saturating_sub(1),
            Tok::Punct(';') | Tok::Punct(',') if depth == 0 => return i + 1,
            Tok::Punct('}') if depth == 0 => return i,
            Tok::Punct('{') => {
                let mut braces = 1;
                i += 1;
                while i < toks.len() && braces > 0 {
                    match toks[i].0 {
                        Tok::Punct('{') => braces += 1,
                        Tok::Punct('}') => braces -= 1,
                        _ => {}
                    }
                    i += 1;
                }
                return i;
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// One path of a use tree and the name it binds (`None` for a glob).
type UsePath = (Vec<String>, Option<String>);

/// The paths of the use tree starting at `i` (after `use`), each with the name it binds (none
/// for a glob), and the index after its `;`.
fn use_tree(toks: &[(Tok, usize)], i: usize) -> (Vec<UsePath>, usize) {
    let mut out = Vec::new();
    let end = use_subtree(toks, i, &[], &mut out);
    let semi = (end..toks.len())
        .find(|&k| toks[k].0 == Tok::Punct(';'))
        .map_or(toks.len(), |k| k + 1);
    (out, semi)
}

fn use_subtree(
    toks: &[(Tok, usize)],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<UsePath>,
) -> usize {
    let mut path = prefix.to_vec();
    if toks.get(i).map(|t| &t.0) == Some(&Tok::Path) {
        i += 1; // a leading `::` (an extern crate)
    }
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
                if toks.get(i).map(|t| &t.0) == Some(&Tok::Path) {
                    i += 1;
                    continue;
                }
                let mut name = path.last().expect("pushed").clone();
                if toks.get(i).map(|t| &t.0) == Some(&Tok::Ident("as".into())) {
                    if let Some(Tok::Ident(alias)) = toks.get(i + 1).map(|t| &t.0) {
                        name = alias.clone();
                    }
                    i += 2;
                }
                if name == "self" {
                    path.pop();
                    name = path.last().cloned().unwrap_or_default();
                }
                out.push((path, Some(name)));
                return i;
            }
            Some(Tok::Punct('*')) => {
                out.push((path, None));
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i).map(|t| &t.0) {
                        Some(Tok::Punct('}')) => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        None => return i,
                        _ => i = use_subtree(toks, i, &path, out),
                    }
                }
            }
            _ => return i,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Resolution and cycles

/// A module: the crate root's file and the module path within that crate.
type ModuleKey = (String, Vec<String>);

/// The crate root and module path of a file (`common/src/envs/mod.rs` -> (`common/src/lib.rs`,
/// `[envs]`)).
fn module_of(path: &str) -> ModuleKey {
    let (krate, rest) = path
        .split_once("/src/")
        .expect("a path under a crate's src/");
    let lib = format!("{krate}/src/lib.rs");
    if rest == "lib.rs" {
        return (lib, Vec::new());
    }
    if rest == "main.rs" || (rest.starts_with("bin/") && rest.matches('/').count() == 1) {
        return (path.to_string(), Vec::new());
    }
    let mut segments: Vec<String> = rest
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if segments.last().is_some_and(|s| s == "mod") {
        segments.pop();
    }
    (lib, segments)
}

struct Graph {
    /// Module -> the file that holds it (inline modules: their file).
    modules: BTreeMap<ModuleKey, usize>,
    parsed: Vec<Parsed>,
    /// Each file's crate root and module.
    keys: Vec<ModuleKey>,
}

impl Graph {
    fn new(files: &[Source]) -> Self {
        let mut modules = BTreeMap::new();
        let mut parsed = Vec::new();
        let mut keys = Vec::new();
        for (id, file) in files.iter().enumerate() {
            let (root, module) = module_of(&file.path);
            let p = parse(&file.text, &module);
            for inline in &p.inline {
                modules.insert((root.clone(), inline.clone()), id);
            }
            modules.insert((root.clone(), module.clone()), id);
            parsed.push(p);
            keys.push((root, module));
        }
        Graph {
            modules,
            parsed,
            keys,
        }
    }

    /// The file of the deepest module a path written in `scope` of file `from` names (`None`:
    /// another crate's path). Re-exports are not followed: a path through a parent's `pub use`
    /// names the parent, whose public face it uses.
    fn resolve(
        &self,
        from: usize,
        scope: &[String],
        segments: &[String],
        hops: usize,
    ) -> Option<usize> {
        let root = &self.keys[from].0;
        let mut module = scope.to_vec();
        let mut rest = segments;
        match rest.first()?.as_str() {
            "crate" | "$crate" => {
                module.clear();
                rest = &rest[1..];
            }
            "self" => rest = &rest[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    module.pop();
                    rest = &rest[1..];
                }
            }
            name => {
                let mut child = module.clone();
                child.push(name.to_string());
                if !self.modules.contains_key(&(root.clone(), child)) {
                    // A name `use`d into this scope (`use crate::shm; shm::ring::..`): follow it.
                    let binding = self.parsed[from]
                        .bindings
                        .iter()
                        .find(|b| b.scope == module && b.name == name)?;
                    if hops > 8 {
                        return None;
                    }
                    let mut path = binding.target.clone();
                    path.extend(rest[1..].iter().cloned());
                    return self.resolve(from, &binding.scope, &path, hops + 1);
                }
            }
        }
        for seg in rest {
            let mut child = module.clone();
            child.push(seg.clone());
            if !self.modules.contains_key(&(root.clone(), child.clone())) {
                break;
            }
            module = child;
        }
        self.modules.get(&(root.clone(), module)).copied()
    }

    /// Edges `from -> to` with the line of the first reference that makes each. A file and
    /// its ancestors' files make none: a parent declares, re-exports and dispatches to its
    /// children, and a child builds on its parent's items (`super::Item`).
    fn edges(&self) -> BTreeMap<(usize, usize), usize> {
        let mut edges = BTreeMap::new();
        for (from, p) in self.parsed.iter().enumerate() {
            let (root, own) = &self.keys[from];
            for r in &p.references {
                let Some(to) = self.resolve(from, &r.scope, &r.segments, 0) else {
                    continue;
                };
                let (to_root, target) = &self.keys[to];
                let lineage = target.starts_with(own) || own.starts_with(target);
                if to == from || to_root != root || lineage {
                    continue;
                }
                edges.entry((from, to)).or_insert(r.line);
            }
        }
        edges
    }
}

/// Every import cycle among `files`, one line per cycle naming its files and the edges that
/// close it (`a.rs:12 -> b.rs`).
fn module_cycles(files: &[Source]) -> Vec<String> {
    let graph = Graph::new(files);
    let edges = graph.edges();
    let n = files.len();
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in edges.keys() {
        next[a].push(b);
    }
    strongly_connected(&next)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|component| {
            let set: BTreeSet<usize> = component.iter().copied().collect();
            let inner: Vec<String> = edges
                .iter()
                .filter(|((a, b), _)| set.contains(a) && set.contains(b))
                .map(|((a, b), line)| format!("{}:{line} -> {}", files[*a].path, files[*b].path))
                .collect();
            format!("  cycle: {}", inner.join(", "))
        })
        .collect()
}

/// Tarjan's strongly connected components of the graph `next` (adjacency lists).
fn strongly_connected(next: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        next: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.counter);
        s.low[v] = s.counter;
        s.counter += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for k in 0..s.next[v].len() {
            let w = s.next[v][k];
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().expect("v is on the stack");
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            component.sort();
            s.out.push(component);
        }
    }
    let n = next.len();
    let mut s = State {
        next,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

// ---------------------------------------------------------------------------------------------
// The checker's own tests, on small trees

fn tree(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .map(|(path, text)| Source {
            path: path.to_string(),
            text: text.to_string(),
        })
        .collect()
}

#[test]
fn checker_finds_a_cycle_between_two_siblings() {
    let files = tree(&[
        ("k/src/lib.rs", "mod a;\nmod b;\n"),
        ("k/src/a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "k/src/b.rs",
            "pub struct B;\nfn f() { let _ = super::a::A; }\n",
        ),
    ]);
    let cycles = module_cycles(&files);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(
        cycles[0].contains("k/src/a.rs:1 -> k/src/b.rs")
            && cycles[0].contains("k/src/b.rs:2 -> k/src/a.rs"),
        "{cycles:?}"
    );
}

#[test]
fn checker_finds_a_longer_cycle_across_directories() {
    let files = tree(&[
        ("k/src/lib.rs", "pub mod x;\npub mod y;\n"),
        ("k/src/x/mod.rs", "pub mod a;\n"),
        ("k/src/x/a.rs", "use crate::y::b::B;\n"),
        ("k/src/y/mod.rs", "pub mod b;\npub mod c;\n"),
        ("k/src/y/b.rs", "pub fn f() { super::c::g() }\n"),
        ("k/src/y/c.rs", "pub fn g() { crate::x::a::h() }\n"),
    ]);
    let cycles = module_cycles(&files);
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    for file in ["k/src/x/a.rs", "k/src/y/b.rs", "k/src/y/c.rs"] {
        assert!(cycles[0].contains(file), "{file} in {cycles:?}");
    }
}

#[test]
fn checker_ignores_comments_strings_tests_and_lineage() {
    let files = tree(&[
        ("k/src/lib.rs", "mod env;\npub use env::Env;\n"),
        // The parent dispatches to its child; the child uses the parent's trait.
        (
            "k/src/env/mod.rs",
            "mod cart;\npub use cart::Cart;\npub trait Env {}\n\
             pub fn make() -> Box<dyn Env> { Box::new(cart::Cart) }\n\
             fn other() { crate::b::f() }\n",
        ),
        ("k/src/env/cart.rs", "use super::Env;\npub struct Cart;\nimpl Env for Cart {}\n"),
        // Names the env module only in a comment, a string, a char and a test.
        (
            "k/src/b.rs",
            "// crate::env::cart::Cart\npub fn f() {}\nconst S: &str = \"crate::env::Cart\";\n\
             const C: char = '\"';\n#[cfg(test)]\nmod tests {\n    use crate::env::cart::Cart;\n}\n",
        ),
    ]);
    let graph = Graph::new(&files);
    let edges: Vec<(usize, usize)> = graph.edges().into_keys().collect();
    assert_eq!(edges, vec![(1, 3)], "env/mod.rs -> b.rs only");
    assert_eq!(module_cycles(&files), Vec::<String>::new());
}

#[test]
fn checker_resolves_inline_modules_globs_and_aliases() {
    let files = tree(&[
        ("k/src/lib.rs", "pub mod x;\npub mod y;\npub mod z;\n"),
        // An inline module's `super` is its file's module.
        (
            "k/src/x.rs",
            "pub struct X;\nmod inner {\n    use super::X;\n    fn f() -> X { X }\n}\n\
             use crate::y as why;\nfn g() { why::h(); }\n",
        ),
        ("k/src/y.rs", "pub fn h() {}\n"),
        ("k/src/z.rs", "use crate::x::*;\nfn k() -> X { X }\n"),
    ]);
    let graph = Graph::new(&files);
    let edges: BTreeMap<(usize, usize), usize> = graph.edges();
    // x -> y (through the alias, line 6), z -> x (the glob, line 1).
    assert_eq!(
        edges.into_iter().collect::<Vec<_>>(),
        vec![((1, 2), 6), ((3, 1), 1)]
    );
}

#[test]
fn wings_and_fused_rules_catch_their_cases() {
    let paths = [
        "learner/src/lib.rs",
        "learner/src/eval.rs",
        "learner/src/algo/mod.rs",
        "learner/src/fused/net.rs",
        "learner/src/algo/fused_update.rs",
        "rnn/src/backend/fused/kernel.rs",
        "rnn/src/backend/mod.rs",
    ];
    assert_eq!(
        top_level_files(&paths, "learner/src"),
        ["learner/src/lib.rs", "learner/src/eval.rs"]
    );
    assert_eq!(
        stray_fused(&paths),
        [
            "learner/src/fused/net.rs",
            "learner/src/algo/fused_update.rs"
        ]
    );
    assert!(stray_fused(&[
        "rnn/src/backend/fused/simd.rs",
        "learner/src/algo/ppo/flat/net.rs"
    ])
    .is_empty());
}

#[test]
fn lines_are_counted_up_to_the_trailing_tests() {
    assert_eq!(non_test_lines("a\nb\n\n#[cfg(test)]\nmod tests {\n}\n"), 3);
    assert_eq!(
        non_test_lines("a\n#[cfg(test)]\nfn only_in_tests() {}\nb\n"),
        4
    );
    assert_eq!(non_test_lines("a\nb\n"), 2);
}

#[test]
fn strip_blanks_comments_strings_and_chars_but_not_lifetimes() {
    let code: String = strip("a /* b /* c */ d */ e // f\n\"g\\\"h\" r#\"i\"# 'j' 'k: '\\n'")
        .into_iter()
        .collect();
    assert_eq!(
        code.split_whitespace().collect::<Vec<_>>(),
        ["a", "e", "'k:"]
    );
}
