//! What the property tests of both crates share: any JSON value, and one
//! member of a valid document broken (left out, replaced, or joined by
//! another), with the field names a refusal must name one of. Included by
//! `supplychain/tests/parsers_prop.rs` and `operator/tests/parsers_prop.rs`
//! (`#[path]`), as test crates cannot depend on each other's tests.

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

/// 256 cases each, or `PROPTEST_CASES` for a longer sweep (proptest's
/// default config reads it).
pub fn config() -> ProptestConfig {
    let default = ProptestConfig::default();
    let cases = match std::env::var_os("PROPTEST_CASES") {
        Some(_) => default.cases,
        None => 256,
    };
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..default
    }
}

// ---- JSON values and mutations of documents ----

/// Any JSON value, a few levels deep, with the numbers that break integer
/// fields (negative, past `i32`/`u8`, fractions).
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(u64::MAX),
            Just(256u64),
            Just(0u64),
            Just(1u64),
            Just(i32::MAX as u64 + 1)
        ]
        .prop_map(Value::from),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        ".{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// How one member of a document is broken.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// The member is left out.
    Drop,
    /// The member holds another value.
    Replace(Value),
    /// The object holding the member gets one more.
    Add(String, Value),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::Drop),
        json_value().prop_map(Mutation::Replace),
        ("[a-zA-Z_]{1,10}", json_value()).prop_map(|(k, v)| Mutation::Add(k, v)),
    ]
}

pub fn paths(v: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                at.push(Step::Key(k.clone()));
                out.push(at.clone());
                paths(child, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                at.push(Step::Index(i));
                out.push(at.clone());
                paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// Applies `mutation` at one of the members of `doc` under `under` (chosen
/// by `index`); answers the names of the fields on the way to it (the added
/// one for [`Mutation::Add`]), which a refusal must name one of.
pub fn mutate_under(
    doc: &mut Value,
    under: &[&str],
    index: Index,
    mutation: &Mutation,
) -> Vec<String> {
    let mut all = Vec::new();
    paths(doc, &mut Vec::new(), &mut all);
    all.retain(|p| {
        p.len() > under.len()
            && under
                .iter()
                .zip(p)
                .all(|(u, s)| *s == Step::Key((*u).to_string()))
    });
    let path = all[index.index(all.len())].clone();
    let mut keys: Vec<String> = path
        .iter()
        .filter_map(|s| match s {
            Step::Key(k) => Some(k.clone()),
            Step::Index(_) => None,
        })
        .collect();
    let (last, parent) = path.split_last().expect("a member");
    let mut holder = &mut *doc;
    for step in parent {
        holder = match step {
            Step::Key(k) => &mut holder[k.as_str()],
            Step::Index(i) => &mut holder[*i],
        };
    }
    match (mutation, last) {
        (Mutation::Drop, Step::Key(k)) => {
            holder.as_object_mut().map(|o| o.remove(k));
        }
        (Mutation::Drop, Step::Index(i)) => {
            holder.as_array_mut().map(|a| a.remove(*i));
        }
        (Mutation::Replace(v), Step::Key(k)) => holder[k.as_str()] = v.clone(),
        (Mutation::Replace(v), Step::Index(i)) => holder[*i] = v.clone(),
        (Mutation::Add(k, v), _) => {
            if let Some(o) = holder.as_object_mut() {
                o.insert(k.clone(), v.clone());
                keys.pop();
                keys.push(k.clone());
            }
        }
    }
    keys
}

pub fn mutate(doc: &mut Value, index: Index, mutation: &Mutation) -> Vec<String> {
    mutate_under(doc, &[], index, mutation)
}

pub fn names_one_of(text: &str, keys: &[String]) -> bool {
    keys.iter().any(|k| text.contains(k.as_str()))
}
