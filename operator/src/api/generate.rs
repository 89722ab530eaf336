//! What `crdgen` writes: one CRD YAML per kind under `charts/ptah-operator/crds/`
//! and the field reference `docs/api.md`, both derived from the Rust types so
//! they can never say something the types do not.

use std::fmt::Write as _;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use super::{
    PtahMigration, PtahMigrationApproval, PtahMigrationPlan, PtahMigrationRunAcknowledgment,
    PtahRealm, PtahSchema, PtahSchemaApproval, PtahSchemaPlan, PtahSchemaPlanChunk,
};

/// The command that regenerates every file below.
pub const REGENERATE: &str = "cargo run -p ptah-operator --bin crdgen";
/// Where the CRDs go, relative to the workspace root.
pub const CRD_DIR: &str = "charts/ptah-operator/crds";
/// Where the field reference goes, relative to the workspace root.
pub const API_DOC: &str = "docs/api.md";

/// Fields whose type is a Kubernetes type documented upstream: the reference
/// lists the field, not the type's own fields.
const KUBERNETES_TYPED: &[&str] = &[
    "spec.execution.affinity",
    "spec.execution.resources",
    "spec.execution.tolerations",
    "spec.execution.imagePullSecrets",
];

/// A file `crdgen` writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedFile {
    /// Path relative to the workspace root.
    pub path: String,
    /// Exact contents.
    pub contents: String,
}

/// The generation failed (serialising a CRD).
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A CRD did not serialise to YAML.
    #[error("CRD {name} does not serialise to YAML: {source}")]
    Yaml {
        /// The CRD's name.
        name: String,
        /// The serialiser's error.
        source: serde_saphyr::SerializeError,
    },
    /// A CRD did not serialise to JSON.
    #[error("CRD {name} does not serialise to JSON: {source}")]
    Json {
        /// The CRD's name.
        name: String,
        /// The serialiser's error.
        source: serde_json::Error,
    },
}

/// Every CRD of the API, in the order the reference lists them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        PtahSchema::crd(),
        PtahSchemaPlan::crd(),
        PtahSchemaPlanChunk::crd(),
        PtahSchemaApproval::crd(),
        PtahMigration::crd(),
        PtahMigrationPlan::crd(),
        PtahMigrationApproval::crd(),
        PtahMigrationRunAcknowledgment::crd(),
        PtahRealm::crd(),
    ]
}

/// Every generated file with its contents.
pub fn files() -> Result<Vec<GeneratedFile>, GenerateError> {
    let crds = crds();
    let mut out = Vec::with_capacity(crds.len() + 1);
    for crd in &crds {
        out.push(GeneratedFile {
            path: format!("{CRD_DIR}/{}", crd_file_name(crd)),
            contents: crd_yaml(crd)?,
        });
    }
    out.push(GeneratedFile {
        path: API_DOC.to_string(),
        contents: api_reference(&crds)?,
    });
    Ok(out)
}

/// `operator.ptah.run_<plural>.yaml`, as controller-gen names CRD files.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

fn crd_name(crd: &CustomResourceDefinition) -> String {
    crd.metadata.name.clone().unwrap_or_default()
}

/// One CRD as YAML, under a header naming its source.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, GenerateError> {
    let body = serde_saphyr::to_string(crd).map_err(|source| GenerateError::Yaml {
        name: crd_name(crd),
        source,
    })?;
    Ok(format!(
        "# Generated from operator/src/api by `{REGENERATE}`. Do not edit.\n{body}"
    ))
}

fn schema_of(crd: &CustomResourceDefinition) -> Result<Value, GenerateError> {
    let schema = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref());
    serde_json::to_value(schema).map_err(|source| GenerateError::Json {
        name: crd_name(crd),
        source,
    })
}

/// The field reference: for each kind, its names, printer columns, rules on
/// the whole object and one row per field.
pub fn api_reference(crds: &[CustomResourceDefinition]) -> Result<String, GenerateError> {
    let mut md = String::new();
    md.push_str("# API reference: `operator.ptah.run/v1alpha1`\n\n");
    let _ = writeln!(
        md,
        "Generated from the Rust types in `operator/src/api/` by `{REGENERATE}`; do not edit. \
         The CRDs in `charts/ptah-operator/crds/` come from the same types. Every kind is in \
         the category `ptah`, so `kubectl get ptah -A` lists them all, and every field's \
         description is what `kubectl explain` prints.\n"
    );
    md.push_str("| Kind | Scope | Short names | Status subresource |\n| --- | --- | --- | --- |\n");
    for crd in crds {
        let names = &crd.spec.names;
        let has_status = crd
            .spec
            .versions
            .first()
            .and_then(|v| v.subresources.as_ref())
            .and_then(|s| s.status.as_ref())
            .is_some();
        let _ = writeln!(
            md,
            "| [`{kind}`](#{anchor}) | {scope} | {short} | {status} |",
            kind = names.kind,
            anchor = names.kind.to_lowercase(),
            scope = crd.spec.scope,
            short = names
                .short_names
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", "),
            status = if has_status { "yes" } else { "no" },
        );
    }
    for crd in crds {
        md.push('\n');
        kind_section(&mut md, crd)?;
    }
    Ok(md)
}

fn kind_section(md: &mut String, crd: &CustomResourceDefinition) -> Result<(), GenerateError> {
    let names = &crd.spec.names;
    let schema = schema_of(crd)?;
    let _ = writeln!(md, "## {}\n", names.kind);
    if let Some(description) = schema.get("description").and_then(Value::as_str) {
        let _ = writeln!(md, "{}\n", one_line(description));
    }
    let _ = writeln!(
        md,
        "`kubectl get {plural}` (singular `{singular}`, scope {scope}).\n",
        plural = names.plural,
        singular = names.singular.as_deref().unwrap_or_default(),
        scope = crd.spec.scope,
    );
    if let Some(columns) = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.additional_printer_columns.as_ref())
    {
        md.push_str("Printer columns: ");
        let cols: Vec<String> = columns
            .iter()
            .map(|c| {
                let wide = if c.priority.unwrap_or(0) > 0 {
                    " (wide)"
                } else {
                    ""
                };
                format!("{}{} (`{}`)", c.name, wide, c.json_path)
            })
            .collect();
        let _ = writeln!(md, "{}.\n", cols.join(", "));
    }
    let root_rules = rules_of(&schema);
    if !root_rules.is_empty() {
        let _ = writeln!(md, "Rules on the object: {}.\n", root_rules.join("; "));
    }
    md.push_str("| Field | Type | Default | Validation | Description |\n");
    md.push_str("| --- | --- | --- | --- | --- |\n");
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let required = required_of(&schema);
        for (name, prop) in props {
            field_rows(md, name, prop, required.contains(&name.as_str()));
        }
    }
    Ok(())
}

fn required_of(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn field_rows(md: &mut String, path: &str, schema: &Value, required: bool) {
    let _ = writeln!(
        md,
        "| `{path}` | {ty} | {default} | {validation} | {description} |",
        ty = cell(&type_of(schema)),
        default = schema
            .get("default")
            .map(|d| format!("`{}`", cell(&d.to_string())))
            .unwrap_or_default(),
        validation = cell(&validation_of(schema, required).join("; ")),
        description = cell(&one_line(
            schema
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
        )),
    );
    if KUBERNETES_TYPED.contains(&path) {
        return;
    }
    let (children, prefix) = match schema.get("type").and_then(Value::as_str) {
        Some("array") => match schema.get("items") {
            Some(items) => (items, format!("{path}[]")),
            None => return,
        },
        _ => (schema, path.to_string()),
    };
    if let Some(props) = children.get("properties").and_then(Value::as_object) {
        let required = required_of(children);
        for (name, prop) in props {
            field_rows(
                md,
                &format!("{prefix}.{name}"),
                prop,
                required.contains(&name.as_str()),
            );
        }
    }
}

fn type_of(schema: &Value) -> String {
    if schema.get("x-kubernetes-int-or-string").is_some() {
        return "int or string".into();
    }
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("any");
    match ty {
        "array" => format!(
            "[]{}",
            schema
                .get("items")
                .map(type_of)
                .unwrap_or_else(|| "any".into())
        ),
        "object" if schema.get("properties").is_none() => {
            match schema.get("additionalProperties") {
                Some(v) if v.is_object() => format!("map[string]{}", type_of(v)),
                _ => "object".into(),
            }
        }
        _ => match schema.get("format").and_then(Value::as_str) {
            Some(format) => format!("{ty} ({format})"),
            None => ty.to_string(),
        },
    }
}

fn validation_of(schema: &Value, required: bool) -> Vec<String> {
    let mut v = Vec::new();
    if required {
        v.push("required".into());
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .map(|x| match x.as_str() {
                Some(s) => format!("`{s}`"),
                None => format!("`{x}`"),
            })
            .collect();
        v.push(format!("one of {}", values.join(", ")));
    }
    bounds(&mut v, schema, "minLength", "maxLength", "length");
    bounds(&mut v, schema, "minimum", "maximum", "value");
    bounds(&mut v, schema, "minItems", "maxItems", "items");
    bounds(&mut v, schema, "minProperties", "maxProperties", "entries");
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        v.push(format!("pattern `{p}`"));
    }
    if let Some(items) = schema.get("items") {
        let inner = validation_of(items, false);
        if !inner.is_empty() {
            v.push(format!("each: {}", inner.join(", ")));
        }
    }
    if let Some(values) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        let inner = validation_of(values, false);
        if !inner.is_empty() {
            v.push(format!("each value: {}", inner.join(", ")));
        }
    }
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<String> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(Value::as_str)
                        .map(|s| format!("`{s}`"))
                        .collect()
                })
                .unwrap_or_default();
            v.push(format!("list map keyed by {}", keys.join(", ")));
        }
        Some("set") => v.push("set".into()),
        _ => {}
    }
    v.extend(rules_of(schema));
    v
}

fn bounds(v: &mut Vec<String>, schema: &Value, min: &str, max: &str, what: &str) {
    let lo = schema.get(min).map(number);
    let hi = schema.get(max).map(number);
    match (lo, hi) {
        (Some(lo), Some(hi)) if lo == hi => v.push(format!("{what} = {lo}")),
        (Some(lo), Some(hi)) => v.push(format!("{what} {lo}–{hi}")),
        (Some(lo), None) => v.push(format!("{what} ≥ {lo}")),
        (None, Some(hi)) => v.push(format!("{what} ≤ {hi}")),
        (None, None) => {}
    }
}

/// `86400`, not `86400.0`: Kubernetes keeps bounds as floats.
fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

fn rules_of(schema: &Value) -> Vec<String> {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .map(|r| {
                    let rule = r.get("rule").and_then(Value::as_str).unwrap_or_default();
                    match r.get("message").and_then(Value::as_str) {
                        Some(m) => format!("CEL `{rule}`: “{m}”"),
                        None => format!("CEL `{rule}`"),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Escapes what would break a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}
