//! Compares every draw of recur's port of numpy's `default_rng`
//! (`common::envs::popgym::numpy_rng`, which the native POPGym environments draw
//! from) with numpy itself.
//!
//! Runs `python3` (or `$RECUR_PYTHON`) on an embedded script that prints JSON
//! with numpy's draws, then replays the same calls in Rust and asserts exact
//! equality (floats compared by `to_bits`; the script sends floats as their
//! IEEE-754 bit patterns so no decimal round trip is involved).
//!
//! Like the repo's other Python tests, without Python and numpy they pass without running and
//! print a `SKIPPED <test>: <why>` line (uncaptured), unless `RECUR_REQUIRE_PYTHON` is set
//! (CI sets it), which makes them fail.

use common::envs::popgym::numpy_rng::{Generator, Pcg64, SeedSequence};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;

mod python;

const SEEDS: [u64; 5] = [0, 1, 42, 12345, (1 << 32) + 7];

const SCRIPT: &str = r#"
import json, random, struct, sys
import numpy as np

def fbits(x):
    return struct.unpack('<Q', struct.pack('<d', float(x)))[0]

def f32bits(x):
    return struct.unpack('<I', struct.pack('<f', float(x)))[0]

def rng_for(seed):
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))

N = 2000
INT_RANGES = [(0, 1), (0, 2), (0, 3), (0, 10), (0, 2**31), (0, 2**33), (-5, 5),
              (0, 2**32 - 1), (0, 2**32), (0, 2**32 + 1), (-2**62, 2**62),
              (-2**63, 2**63 - 1), (0, 52), (1000, 1007),
              # Ranges where Lemire's rejection loop runs often (~25% / ~37%).
              (0, 3 * 2**30), (-2**62, 2**63 - 2**61)]
NORMAL_PARAMS = [(1.5, 2.0), (-3.0, 0.1), (0.0, 0.0), (1e6, 1e-3)]
UNIFORM_PARAMS = [(-0.05, 0.05), (0.0, 1.0), (-3.0, 7.5), (2.0, 2.0), (1e6, 1e6 + 1e-3),
                  (-1e-300, 1e300)]

seeds = [int(s) for s in sys.argv[1:]]
out = {"numpy_version": np.__version__, "seeds": []}
for seed in seeds:
    d = {"seed": seed}
    ss = np.random.SeedSequence(seed)
    d["pool"] = [int(v) for v in ss.pool]
    d["ss_u32"] = [int(v) for v in ss.generate_state(8, np.uint32)]
    d["ss_u64"] = [int(v) for v in ss.generate_state(4, np.uint64)]
    st = np.random.PCG64(ss).state["state"]
    d["pcg_state"] = [int(st["state"]) >> 64, int(st["state"]) & (2**64 - 1),
                      int(st["inc"]) >> 64, int(st["inc"]) & (2**64 - 1)]
    # gymnasium's np_random for reset(seed=seed) is default_rng(seed).
    assert rng_for(seed).random() == np.random.default_rng(seed).random()

    g = rng_for(seed)
    d["raw_u64"] = [int(v) for v in g.bit_generator.random_raw(N)]

    g = rng_for(seed)
    d["u32"] = [int(g.integers(0, 2**32)) for _ in range(N)]

    g = rng_for(seed)
    d["random"] = [fbits(g.random()) for _ in range(N)]

    g = rng_for(seed)
    d["random_array"] = [fbits(v) for v in g.random(N)]

    ints = []
    for lo, hi in INT_RANGES:
        g = rng_for(seed)
        ints.append({"low": lo, "high": hi,
                     "scalar": [int(g.integers(lo, hi)) for _ in range(N)],
                     "array": [int(v) for v in g.integers(lo, hi, size=N)]})
    d["integers"] = ints

    g = rng_for(seed)
    # 20000 draws per seed reach the ziggurat tail (idx == 0) ~7 times and
    # the wedge test ~300 times.
    d["standard_normal"] = [fbits(g.standard_normal()) for _ in range(10 * N)]
    g = rng_for(seed)
    d["standard_normal_array"] = [fbits(v) for v in g.standard_normal(10 * N)]

    normals = []
    for loc, scale in NORMAL_PARAMS:
        g = rng_for(seed)
        normals.append({"loc": fbits(loc), "scale": fbits(scale),
                        "out": [fbits(g.normal(loc, scale)) for _ in range(N)]})
    d["normal"] = normals

    # uniform: scalar bounds (one value, or size=4 as CartPole's reset), array bounds (as
    # Pendulum's reset), interleaved with standard normals (the noisy popgym envs).
    g = rng_for(seed)
    un = []
    for k in range(N):
        lo, hi = UNIFORM_PARAMS[k % len(UNIFORM_PARAMS)]
        if k % 4 == 0:
            vals = [g.uniform(lo, hi)]
        elif k % 4 == 1:
            vals = list(g.uniform(low=lo, high=hi, size=(4,)))
        elif k % 4 == 2:
            high = np.array([np.pi, 1.0])
            lo, hi = [-np.pi, -1.0], [np.pi, 1.0]
            vals = list(g.uniform(low=-high, high=high))
        else:
            un.append({"lo": [], "hi": [], "out": [fbits(g.standard_normal())]})
            continue
        lo = lo if isinstance(lo, list) else [lo]
        hi = hi if isinstance(hi, list) else [hi]
        un.append({"lo": [fbits(v) for v in lo], "hi": [fbits(v) for v in hi],
                   "out": [fbits(v) for v in vals]})
    d["uniform"] = un

    g = rng_for(seed)
    seq = ["a", "b", "c", "d"]
    d["choice4"] = [int(g.choice(4)) if k % 2 == 0 else seq.index(g.choice(seq))
                    for k in range(N)]
    g = rng_for(seed)
    d["choice_big"] = [int(g.choice(100000)) for _ in range(N)]

    # random(dtype=np.float32): scalars, then arrays, interleaved with float64
    # and uint32 draws so the uint32 buffer carries across (MultiarmedBandit).
    g = rng_for(seed)
    f32 = []
    for k in range(N):
        if k % 5 == 0:
            f32.append(["a", [f32bits(v) for v in g.random(7, dtype=np.float32)]])
        elif k % 5 == 1:
            f32.append(["d", [fbits(g.random())]])
        else:
            f32.append(["s", [f32bits(g.random(dtype=np.float32))]])
    d["random_f32"] = f32

    # choice(a, size, replace=False): Floyd's path (small populations, as
    # MineSweeper's) and the tail-shuffle path (pop > 10000, size > pop // 50).
    g = rng_for(seed)
    cw = []
    for pop, size in [(16, 2), (36, 6), (64, 10), (5, 5), (1, 1), (7, 0), (100, 99),
                      (3, 1), (20000, 500), (20000, 3), (16, 2), (64, 10)] * 20:
        cw.append({"pop": pop, "size": size,
                   "out": [int(v) for v in g.choice(np.arange(pop), size=size, replace=False)]})
    d["choice_noreplace"] = cw

    shuffles = []
    for n, reps in [(52, 60), (7, 300), (1, 3), (2, 50), (0, 2), (300, 5)]:
        g = rng_for(seed)
        lst = list(range(n))
        arr = np.arange(n)
        g2 = rng_for(seed)
        res = []
        for _ in range(reps):
            g.shuffle(lst)          # Python-list path
            g2.shuffle(arr)         # ndarray fast path
            assert lst == arr.tolist()
            res.append(list(lst))
        shuffles.append({"n": n, "out": res})
    d["shuffle"] = shuffles

    g = rng_for(seed)
    d["permutation"] = [{"n": n, "out": [int(v) for v in g.permutation(n)]}
                        for n in [1, 2, 3, 10, 52, 1000, 7, 7, 7, 0, 5]]

    # Interleaved calls: the uint32 buffer must carry across methods.
    py = random.Random(seed * 7919 + 1)
    g = rng_for(seed)
    ops = []
    for _ in range(4000):
        k = py.choice(["int", "int", "int", "rand", "norm", "normal", "choice",
                       "shuffle", "perm", "raw"])
        if k == "int":
            lo, hi = py.choice(INT_RANGES)
            ops.append({"op": k, "a": [lo, hi], "r": [int(g.integers(lo, hi))]})
        elif k == "rand":
            ops.append({"op": k, "a": [], "r": [fbits(g.random())]})
        elif k == "norm":
            ops.append({"op": k, "a": [], "r": [fbits(g.standard_normal())]})
        elif k == "normal":
            loc, scale = py.choice(NORMAL_PARAMS)
            ops.append({"op": k, "a": [fbits(loc), fbits(scale)],
                        "r": [fbits(g.normal(loc, scale))]})
        elif k == "choice":
            n = py.choice([1, 2, 3, 4, 52, 1000])
            ops.append({"op": k, "a": [n], "r": [int(g.choice(n))]})
        elif k == "shuffle":
            n = py.choice([0, 1, 2, 7, 52])
            lst = list(range(n))
            g.shuffle(lst)
            ops.append({"op": k, "a": [n], "r": lst})
        elif k == "perm":
            n = py.choice([0, 1, 3, 10])
            ops.append({"op": k, "a": [n], "r": [int(v) for v in g.permutation(n)]})
        else:
            ops.append({"op": k, "a": [], "r": [int(g.bit_generator.random_raw())]})
    st = g.bit_generator.state
    d["ops"] = ops
    d["final_has_uint32"] = int(st["has_uint32"])
    d["final_uinteger"] = int(st["uinteger"])
    out["seeds"].append(d)

json.dump(out, sys.stdout)
"#;

// ---------------------------------------------------------------------------
// Minimal JSON reader (objects, arrays, strings without escapes, integers).
// ---------------------------------------------------------------------------

#[derive(Debug)]
enum Json {
    Int(i128),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(m) => m
                .get(key)
                .unwrap_or_else(|| panic!("missing key {key:?} in numpy output")),
            _ => panic!("not an object when looking up {key:?}"),
        }
    }
    fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(v) => v,
            other => panic!("expected array, got {other:?}"),
        }
    }
    fn int(&self) -> i128 {
        match self {
            Json::Int(i) => *i,
            other => panic!("expected integer, got {other:?}"),
        }
    }
    fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("expected string, got {other:?}"),
        }
    }
    fn u64(&self) -> u64 {
        u64::try_from(self.int()).expect("value does not fit u64")
    }
    fn i64(&self) -> i64 {
        i64::try_from(self.int()).expect("value does not fit i64")
    }
    fn usize(&self) -> usize {
        usize::try_from(self.int()).expect("value does not fit usize")
    }
    fn u64s(&self) -> Vec<u64> {
        self.arr().iter().map(Json::u64).collect()
    }
    fn i64s(&self) -> Vec<i64> {
        self.arr().iter().map(Json::i64).collect()
    }
    fn usizes(&self) -> Vec<usize> {
        self.arr().iter().map(Json::usize).collect()
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) {
        self.ws();
        assert_eq!(
            self.s.get(self.i),
            Some(&c),
            "JSON: expected {:?} at {}",
            c as char,
            self.i
        );
        self.i += 1;
    }
    fn peek(&mut self) -> u8 {
        self.ws();
        *self.s.get(self.i).expect("JSON: unexpected end")
    }
    fn value(&mut self) -> Json {
        match self.peek() {
            b'{' => {
                self.eat(b'{');
                let mut m = BTreeMap::new();
                if self.peek() == b'}' {
                    self.eat(b'}');
                    return Json::Obj(m);
                }
                loop {
                    let k = self.string();
                    self.eat(b':');
                    let v = self.value();
                    m.insert(k, v);
                    if self.peek() == b',' {
                        self.eat(b',');
                    } else {
                        self.eat(b'}');
                        return Json::Obj(m);
                    }
                }
            }
            b'[' => {
                self.eat(b'[');
                let mut v = Vec::new();
                if self.peek() == b']' {
                    self.eat(b']');
                    return Json::Arr(v);
                }
                loop {
                    v.push(self.value());
                    if self.peek() == b',' {
                        self.eat(b',');
                    } else {
                        self.eat(b']');
                        return Json::Arr(v);
                    }
                }
            }
            b'"' => Json::Str(self.string()),
            _ => {
                let start = self.i;
                if self.s[self.i] == b'-' {
                    self.i += 1;
                }
                while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                Json::Int(
                    text.parse()
                        .unwrap_or_else(|_| panic!("JSON: bad integer {text:?} at {start}")),
                )
            }
        }
    }
    fn string(&mut self) -> String {
        self.eat(b'"');
        let start = self.i;
        while self.s[self.i] != b'"' {
            assert_ne!(self.s[self.i], b'\\', "JSON: escapes unsupported");
            self.i += 1;
        }
        let s = std::str::from_utf8(&self.s[start..self.i])
            .unwrap()
            .to_owned();
        self.i += 1;
        s
    }
}

// ---------------------------------------------------------------------------
// Running numpy once for all tests.
// ---------------------------------------------------------------------------

fn numpy_data() -> &'static Json {
    static DATA: OnceLock<Json> = OnceLock::new();
    DATA.get_or_init(|| {
        let python = python::python();
        let output = Command::new(&python)
            .arg("-c")
            .arg(SCRIPT)
            .args(SEEDS.iter().map(u64::to_string))
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "FAILED to run `{python}` ({e}). These tests compare against numpy and \
                     need Python 3 with numpy installed (`python3 -m pip install numpy`), \
                     or RECUR_PYTHON set to such an interpreter."
                )
            });
        if !output.status.success() {
            panic!(
                "`{python}` with numpy FAILED ({}). These tests need Python 3 with numpy \
                 (`python3 -m pip install numpy`) or RECUR_PYTHON pointing at one.\nstderr:\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let mut p = Parser {
            s: &output.stdout,
            i: 0,
        };
        let data = p.value();
        eprintln!(
            "comparing against numpy {}",
            data.get("numpy_version").str()
        );
        data
    })
}

/// Whether the interpreter can import numpy ([`python::modules_available`]).
fn numpy_available() -> bool {
    python::modules_available(&["numpy"], "compare the port with numpy")
}

/// Every seed's numpy draws; none (after the skip line) without numpy.
fn per_seed() -> impl Iterator<Item = (u64, &'static Json)> {
    if !numpy_available() {
        return Vec::new().into_iter();
    }
    let seeds = numpy_data().get("seeds").arr();
    assert_eq!(seeds.len(), SEEDS.len());
    seeds
        .iter()
        .map(|d| (d.get("seed").u64(), d))
        .collect::<Vec<_>>()
        .into_iter()
}

fn f(bits: &Json) -> f64 {
    f64::from_bits(bits.u64())
}

/// Asserts bitwise equality of two f64 sequences with a helpful message.
fn assert_f64s(what: &str, seed: u64, expected: &[u64], got: &[f64]) {
    assert_eq!(expected.len(), got.len(), "{what} seed {seed}: length");
    for (k, (&e, &g)) in expected.iter().zip(got).enumerate() {
        assert_eq!(
            e,
            g.to_bits(),
            "{what} seed {seed} draw {k}: numpy {} vs rust {}",
            f64::from_bits(e),
            g
        );
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn seeding_matches() {
    for (seed, d) in per_seed() {
        let ss = SeedSequence::from_u64(seed);
        let pool: Vec<u64> = ss.pool().iter().map(|&w| u64::from(w)).collect();
        assert_eq!(pool, d.get("pool").u64s(), "pool, seed {seed}");
        let u32s: Vec<u64> = ss
            .generate_state_u32(8)
            .into_iter()
            .map(u64::from)
            .collect();
        assert_eq!(
            u32s,
            d.get("ss_u32").u64s(),
            "generate_state u32, seed {seed}"
        );
        assert_eq!(
            ss.generate_state_u64(4),
            d.get("ss_u64").u64s(),
            "generate_state u64, seed {seed}"
        );
        let (state, inc) = Pcg64::new(&ss).state_and_increment();
        let got = vec![
            (state >> 64) as u64,
            state as u64,
            (inc >> 64) as u64,
            inc as u64,
        ];
        assert_eq!(
            got,
            d.get("pcg_state").u64s(),
            "PCG64 state/inc, seed {seed}"
        );
    }
}

#[test]
fn raw_u64_and_u32_match() {
    for (seed, d) in per_seed() {
        let mut g = Generator::from_seed(seed);
        let expected = d.get("raw_u64").u64s();
        let got: Vec<u64> = expected.iter().map(|_| g.next_u64()).collect();
        assert_eq!(got, expected, "random_raw, seed {seed}");

        let mut g = Generator::from_seed(seed);
        let expected = d.get("u32").u64s();
        let got: Vec<u64> = expected.iter().map(|_| u64::from(g.next_u32())).collect();
        assert_eq!(
            got, expected,
            "next_u32 via integers(0, 2**32), seed {seed}"
        );
    }
}

#[test]
fn random_matches() {
    for (seed, d) in per_seed() {
        for key in ["random", "random_array"] {
            let mut g = Generator::from_seed(seed);
            let expected = d.get(key).u64s();
            let got: Vec<f64> = expected.iter().map(|_| g.random()).collect();
            assert_f64s(key, seed, &expected, &got);
        }
    }
}

#[test]
fn integers_match() {
    for (seed, d) in per_seed() {
        for case in d.get("integers").arr() {
            let (lo, hi) = (case.get("low").i64(), case.get("high").i64());
            // The scalar calls and then the size=N array call share one generator.
            let mut g = Generator::from_seed(seed);
            for key in ["scalar", "array"] {
                let expected = case.get(key).i64s();
                let got: Vec<i64> = expected.iter().map(|_| g.integers(lo, hi)).collect();
                assert_eq!(got, expected, "integers({lo}, {hi}) {key}, seed {seed}");
            }
        }
    }
}

#[test]
fn normals_match() {
    for (seed, d) in per_seed() {
        for key in ["standard_normal", "standard_normal_array"] {
            let mut g = Generator::from_seed(seed);
            let expected = d.get(key).u64s();
            let got: Vec<f64> = expected.iter().map(|_| g.standard_normal()).collect();
            assert_f64s(key, seed, &expected, &got);
        }
        for case in d.get("normal").arr() {
            let (loc, scale) = (f(case.get("loc")), f(case.get("scale")));
            let mut g = Generator::from_seed(seed);
            let expected = case.get("out").u64s();
            let got: Vec<f64> = expected.iter().map(|_| g.normal(loc, scale)).collect();
            assert_f64s(&format!("normal({loc}, {scale})"), seed, &expected, &got);
        }
    }
}

#[test]
fn uniform_matches() {
    for (seed, d) in per_seed() {
        let mut g = Generator::from_seed(seed);
        for (k, case) in d.get("uniform").arr().iter().enumerate() {
            let expected = case.get("out").u64s();
            let (lo, hi) = (case.get("lo").u64s(), case.get("hi").u64s());
            let got: Vec<f64> = if lo.is_empty() {
                vec![g.standard_normal()]
            } else {
                (0..expected.len())
                    .map(|j| {
                        let low = f64::from_bits(lo[j % lo.len()]);
                        let high = f64::from_bits(hi[j % hi.len()]);
                        g.uniform(low, high)
                    })
                    .collect()
            };
            assert_f64s(&format!("uniform call {k}"), seed, &expected, &got);
        }
    }
}

#[test]
fn choice_matches() {
    for (seed, d) in per_seed() {
        let mut g = Generator::from_seed(seed);
        let expected = d.get("choice4").usizes();
        let got: Vec<usize> = expected.iter().map(|_| g.choice_index(4)).collect();
        assert_eq!(got, expected, "choice(4)/choice(seq of 4), seed {seed}");

        let mut g = Generator::from_seed(seed);
        let expected = d.get("choice_big").usizes();
        let got: Vec<usize> = expected.iter().map(|_| g.choice_index(100_000)).collect();
        assert_eq!(got, expected, "choice(100000), seed {seed}");
    }
}

#[test]
fn random_f32_matches() {
    for (seed, d) in per_seed() {
        let mut g = Generator::from_seed(seed);
        for (k, entry) in d.get("random_f32").arr().iter().enumerate() {
            let kind = entry.arr()[0].str();
            for (i, want) in entry.arr()[1].arr().iter().enumerate() {
                let got = if kind == "d" {
                    g.random().to_bits()
                } else {
                    u64::from(g.random_f32().to_bits())
                };
                assert_eq!(
                    got,
                    want.u64(),
                    "random_f32 entry {k} ({kind}) value {i}, seed {seed}"
                );
            }
        }
    }
}

#[test]
fn choice_without_replacement_matches() {
    for (seed, d) in per_seed() {
        let mut g = Generator::from_seed(seed);
        for (k, case) in d.get("choice_noreplace").arr().iter().enumerate() {
            let (pop, size) = (case.get("pop").usize(), case.get("size").usize());
            assert_eq!(
                g.choice_without_replacement(pop, size),
                case.get("out").usizes(),
                "call {k}: choice({pop}, size={size}, replace=False), seed {seed}"
            );
        }
    }
}

#[test]
fn shuffle_and_permutation_match() {
    for (seed, d) in per_seed() {
        for case in d.get("shuffle").arr() {
            let n = case.get("n").usize();
            let mut g = Generator::from_seed(seed);
            let mut v: Vec<usize> = (0..n).collect();
            for (rep, expected) in case.get("out").arr().iter().enumerate() {
                g.shuffle(&mut v);
                assert_eq!(
                    v,
                    expected.usizes(),
                    "shuffle of {n}, rep {rep}, seed {seed}"
                );
            }
        }
        let mut g = Generator::from_seed(seed);
        for case in d.get("permutation").arr() {
            let n = case.get("n").usize();
            assert_eq!(
                g.permutation(n),
                case.get("out").usizes(),
                "permutation({n}), seed {seed}"
            );
        }
    }
}

#[test]
fn interleaved_calls_match() {
    for (seed, d) in per_seed() {
        let mut g = Generator::from_seed(seed);
        for (k, op) in d.get("ops").arr().iter().enumerate() {
            let name = op.get("op").str();
            let a = op.get("a").arr();
            let r = op.get("r");
            let ctx = format!("op {k} ({name} {a:?}), seed {seed}");
            match name {
                "int" => assert_eq!(
                    g.integers(a[0].i64(), a[1].i64()),
                    r.arr()[0].i64(),
                    "{ctx}"
                ),
                "rand" => assert_eq!(g.random().to_bits(), r.arr()[0].u64(), "{ctx}"),
                "norm" => assert_eq!(g.standard_normal().to_bits(), r.arr()[0].u64(), "{ctx}"),
                "normal" => assert_eq!(
                    g.normal(f(&a[0]), f(&a[1])).to_bits(),
                    r.arr()[0].u64(),
                    "{ctx}"
                ),
                "choice" => assert_eq!(g.choice_index(a[0].usize()), r.arr()[0].usize(), "{ctx}"),
                "shuffle" => {
                    let mut v: Vec<usize> = (0..a[0].usize()).collect();
                    g.shuffle(&mut v);
                    assert_eq!(v, r.usizes(), "{ctx}");
                }
                "perm" => assert_eq!(g.permutation(a[0].usize()), r.usizes(), "{ctx}"),
                "raw" => assert_eq!(g.next_u64(), r.arr()[0].u64(), "{ctx}"),
                other => panic!("unknown op {other}"),
            }
        }
        let expected_buf = (d.get("final_has_uint32").int() == 1)
            .then(|| u32::try_from(d.get("final_uinteger").int()).unwrap());
        assert_eq!(
            g.bit_generator().buffered_u32(),
            expected_buf,
            "final uint32 buffer, seed {seed}"
        );
    }
}
