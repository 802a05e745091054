//! The traced program: typed inputs, equations, outputs (a jaxpr-like IR).

use std::fmt;

use crate::dtype::DType;
use crate::host::HostArray;
use crate::ops::Prim;

/// A variable of a [`Graph`]: an index into `Graph::avals`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

impl Var {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Abstract value: the shape and dtype of a variable, with no data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Aval {
    pub shape: Vec<usize>,
    pub dtype: DType,
}

impl Aval {
    pub fn new(shape: Vec<usize>, dtype: DType) -> Aval {
        Aval { shape, dtype }
    }
    /// Number of elements (saturating at `usize::MAX`: every shape rule refuses shapes whose size
    /// overflows with [`crate::Error::ShapeTooLarge`], so only a hand-built aval can saturate).
    pub fn size(&self) -> usize {
        crate::tensor::saturating_size(&self.shape)
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Bytes of the value (saturating like [`Aval::size`]).
    pub fn size_bytes(&self) -> usize {
        self.size().saturating_mul(self.dtype.size_bytes())
    }
}

impl fmt::Display for Aval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        write!(f, "{}[{}]", self.dtype, dims.join(","))
    }
}

/// One primitive application: `out = prim(inputs...)`. Control-flow primitives (`cond`, `scan`)
/// have several results: the first is `out`, the others `extra_outs`, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Eqn {
    pub prim: Prim,
    pub inputs: Vec<Var>,
    pub out: Var,
    pub extra_outs: Vec<Var>,
}

impl Eqn {
    /// A single-result equation.
    pub fn new(prim: Prim, inputs: Vec<Var>, out: Var) -> Eqn {
        Eqn {
            prim,
            inputs,
            out,
            extra_outs: Vec::new(),
        }
    }
    /// Every result, in order.
    pub fn outs(&self) -> impl Iterator<Item = Var> + '_ {
        std::iter::once(self.out).chain(self.extra_outs.iter().copied())
    }
}

/// A traced program. Constants captured from the closure are extra inputs with known data.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub avals: Vec<Aval>,
    pub inputs: Vec<Var>,
    pub consts: Vec<(Var, HostArray)>,
    pub eqns: Vec<Eqn>,
    pub outputs: Vec<Var>,
    /// Results of side-effecting equations (`debug_print`): kept although no output reads them.
    pub effects: Vec<Var>,
}

impl Graph {
    pub fn new_var(&mut self, aval: Aval) -> Var {
        self.avals.push(aval);
        Var(self.avals.len() as u32 - 1)
    }
    pub fn aval(&self, v: Var) -> &Aval {
        &self.avals[v.idx()]
    }
    /// Number of uses of each variable (by equations and as outputs).
    pub fn use_counts(&self) -> Vec<usize> {
        let mut n = vec![0; self.avals.len()];
        for e in &self.eqns {
            for v in &e.inputs {
                n[v.idx()] += 1;
            }
        }
        for v in &self.outputs {
            n[v.idx()] += 1;
        }
        n
    }
    /// The equation producing each variable, if any.
    pub fn producers(&self) -> Vec<Option<usize>> {
        let mut p = vec![None; self.avals.len()];
        for (i, e) in self.eqns.iter().enumerate() {
            for o in e.outs() {
                p[o.idx()] = Some(i);
            }
        }
        p
    }
    /// Check that the graph is well formed: every variable is defined once before it is used, and
    /// every equation's result matches its primitive's shape rule. Graphs built by the tracer always
    /// are; this guards graphs assembled by hand before they reach the interpreter or the compiler.
    pub fn check(&self) -> crate::error::Result<()> {
        let bad = |detail: String| crate::error::Error::BadShapeArg {
            op: "graph",
            shape: vec![],
            detail,
        };
        let n = self.avals.len();
        let mut defined = vec![false; n];
        let define = |v: Var, defined: &mut [bool]| -> crate::error::Result<()> {
            if v.idx() >= n || std::mem::replace(&mut defined[v.idx()], true) {
                return Err(bad(format!(
                    "variable {} is out of range or defined twice",
                    v.0
                )));
            }
            Ok(())
        };
        for v in self.inputs.iter().chain(self.consts.iter().map(|(v, _)| v)) {
            define(*v, &mut defined)?;
        }
        for (v, h) in &self.consts {
            if h.shape != self.aval(*v).shape
                || h.dtype() != self.aval(*v).dtype
                || h.len() != self.aval(*v).size()
            {
                return Err(bad(format!(
                    "constant {} does not match its declared {}",
                    v.0,
                    self.aval(*v)
                )));
            }
        }
        for e in &self.eqns {
            if let Some(v) = e.inputs.iter().find(|v| v.idx() >= n || !defined[v.idx()]) {
                return Err(bad(format!(
                    "{} uses variable {} before it is defined",
                    e.prim, v.0
                )));
            }
            let ins: Vec<&Aval> = e.inputs.iter().map(|v| self.aval(*v)).collect();
            let outs = e.prim.infer_outs(&ins)?;
            if outs.len() != 1 + e.extra_outs.len() {
                return Err(bad(format!(
                    "{} has {} results but the equation declares {}",
                    e.prim,
                    outs.len(),
                    1 + e.extra_outs.len()
                )));
            }
            for (out, v) in outs.iter().zip(e.outs()) {
                define(v, &mut defined)?;
                if out != self.aval(v) {
                    return Err(bad(format!(
                        "{} produces {out} but its result is declared {}",
                        e.prim,
                        self.aval(v)
                    )));
                }
            }
        }
        if let Some(v) = self
            .outputs
            .iter()
            .find(|v| v.idx() >= n || !defined[v.idx()])
        {
            return Err(bad(format!("output variable {} is never defined", v.0)));
        }
        Ok(())
    }

    /// The same variables, inputs, constants and outputs with no equations: the start of a
    /// rewriting pass that re-emits the equations.
    pub fn without_eqns(&self) -> Graph {
        Graph {
            avals: self.avals.clone(),
            inputs: self.inputs.clone(),
            consts: self.consts.clone(),
            eqns: Vec::new(),
            outputs: self.outputs.clone(),
            effects: self.effects.clone(),
        }
    }

    /// Remove equations whose results are never used.
    pub fn dce(&mut self) {
        let mut live = vec![false; self.avals.len()];
        for v in self.outputs.iter().chain(&self.effects) {
            live[v.idx()] = true;
        }
        let mut keep = vec![false; self.eqns.len()];
        for (i, e) in self.eqns.iter().enumerate().rev() {
            if e.outs().any(|o| live[o.idx()]) {
                keep[i] = true;
                for v in &e.inputs {
                    live[v.idx()] = true;
                }
            }
        }
        let mut i = 0;
        self.eqns.retain(|_| {
            i += 1;
            keep[i - 1]
        });
    }
}

impl fmt::Display for Graph {
    /// Prints the program like a jaxpr:
    /// `{ lambda c0:f32[] ; a:f32[4,3] b:f32[3] . let c:f32[4,3] = broadcast_in_dim[...] b ... in (d) }`;
    /// the branches of a `cond` and the body of a `scan` follow their equation, indented.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_indented(f, 0)
    }
}

impl Graph {
    fn write_indented(&self, f: &mut fmt::Formatter<'_>, depth: usize) -> fmt::Result {
        let pad = "    ".repeat(depth);
        let name = |v: Var| var_name(v.0);
        let consts: Vec<String> = self
            .consts
            .iter()
            .map(|(v, _)| format!("{}:{}", name(*v), self.aval(*v)))
            .collect();
        let ins: Vec<String> = self
            .inputs
            .iter()
            .map(|v| format!("{}:{}", name(*v), self.aval(*v)))
            .collect();
        writeln!(
            f,
            "{{ lambda {} ; {} . let",
            consts.join(" "),
            ins.join(" ")
        )?;
        for e in &self.eqns {
            let args: Vec<String> = e.inputs.iter().map(|v| name(*v)).collect();
            let outs: Vec<String> = e
                .outs()
                .map(|v| format!("{}:{}", name(v), self.aval(v)))
                .collect();
            writeln!(
                f,
                "{pad}    {} = {} {}",
                outs.join(" "),
                e.prim,
                args.join(" ")
            )?;
            let subs: Vec<(String, &Graph)> = match &e.prim {
                Prim::Control(c) => c.subgraphs(),
                _ => Vec::new(),
            };
            for (label, g) in subs {
                write!(f, "{pad}        {label}: ")?;
                g.write_indented(f, depth + 2)?;
                writeln!(f)?;
            }
        }
        let outs: Vec<String> = self.outputs.iter().map(|v| name(*v)).collect();
        write!(f, "{pad}  in ({}) }}", outs.join(", "))
    }
}

/// Variable names like jaxprs: a, b, ..., z, ba, bb, ...
fn var_name(mut i: u32) -> String {
    let mut s = Vec::new();
    loop {
        s.push(b'a' + (i % 26) as u8);
        i /= 26;
        if i == 0 {
            break;
        }
    }
    s.reverse();
    String::from_utf8(s).unwrap_or_default()
}
