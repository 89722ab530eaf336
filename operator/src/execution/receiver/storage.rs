//! Storage: a result in immutable ConfigMaps owned by the resource (an
//! index and its chunks, the index last), read back and checked at harvest,
//! deleted once the outcome is recorded.

use super::*;

/// The index ConfigMap's name of (operation id, attempt).
pub fn result_name(operation_id: &str, attempt: i32) -> Option<String> {
    sha256_hex(operation_id).map(|hex| format!("ptah-result-{hex}-{attempt}"))
}

pub(super) fn chunk_name(index: &str, i: usize) -> String {
    format!("{index}-c{i}")
}

/// Keys of stored results.
pub(super) mod key {
    pub const OPERATION_ID: &str = "operationID";
    pub const ATTEMPT: &str = "attempt";
    pub const LENGTH: &str = "length";
    pub const SHA256: &str = "sha256";
    pub const CHUNKS: &str = "chunks";
    pub const POD_UID: &str = "podUID";
    pub const JOB_UID: &str = "jobUID";
    pub const RECEIVED_AT: &str = "receivedAt";
    pub const CHUNK: &str = "chunk";
}

/// The objects that store one result: the index (holding chunk 0) and the
/// further chunks, in the order they are created (index last).
pub fn result_objects(
    namespace: &str,
    owner: &OwnerReference,
    op: &OperationRef,
    body: &[u8],
    received_at: Timestamp,
) -> Option<(ConfigMap, Vec<ConfigMap>)> {
    let index_name = result_name(&op.operation_id, op.attempt)?;
    let hex = sha256_hex(&op.operation_id)?;
    let meta = |name: String| ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_string()),
        labels: Some(BTreeMap::from([
            (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
            (LABEL_COMPONENT.to_string(), RESULT_COMPONENT.to_string()),
            (LABEL_OPERATION_ID.to_string(), hex[..16].to_string()),
        ])),
        annotations: Some(BTreeMap::from([
            (ANNOTATION_OPERATION_ID.to_string(), op.operation_id.clone()),
            (ANNOTATION_ATTEMPT.to_string(), op.attempt.to_string()),
        ])),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    let pieces: Vec<&[u8]> = if body.is_empty() {
        vec![body]
    } else {
        body.chunks(CHUNK_BYTES).collect()
    };
    let chunk_map =
        |bytes: &[u8]| BTreeMap::from([(key::CHUNK.to_string(), ByteString(bytes.to_vec()))]);
    let chunks = pieces
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, bytes)| ConfigMap {
            metadata: meta(chunk_name(&index_name, i)),
            immutable: Some(true),
            data: Some(BTreeMap::from([(
                key::SHA256.to_string(),
                content_sha256(bytes),
            )])),
            binary_data: Some(chunk_map(bytes)),
        })
        .collect();
    let mut data = BTreeMap::from([
        (key::OPERATION_ID.to_string(), op.operation_id.clone()),
        (key::ATTEMPT.to_string(), op.attempt.to_string()),
        (key::LENGTH.to_string(), body.len().to_string()),
        (key::SHA256.to_string(), content_sha256(body)),
        (key::CHUNKS.to_string(), pieces.len().to_string()),
        (key::RECEIVED_AT.to_string(), received_at.to_string()),
    ]);
    if let Some(uid) = &op.pod_uid {
        data.insert(key::POD_UID.to_string(), uid.clone());
    }
    if let Some(uid) = &op.job_uid {
        data.insert(key::JOB_UID.to_string(), uid.clone());
    }
    let index = ConfigMap {
        metadata: meta(index_name),
        immutable: Some(true),
        data: Some(data),
        binary_data: Some(chunk_map(pieces[0])),
    };
    Some((index, chunks))
}

/// Why a stored result could not be harvested or discarded.
#[derive(Debug, thiserror::Error)]
pub enum ReceiverError {
    /// The API server refused or failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// Why.
        source: kube::Error,
    },
    /// A stored result does not check out.
    #[error("stored result {name}: {what}")]
    Corrupt {
        /// The ConfigMap.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// The operation id is not `sha256:<64 hex>`.
    #[error("operation id: must be sha256:<64 hex>")]
    OperationId,
}

pub(super) fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ReceiverError {
    let what = what.into();
    move |source| ReceiverError::Api { what, source }
}

/// A stored result, as the controller harvests it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredResult {
    /// The typed document.
    pub document: ResultDocument,
    /// The Pod that delivered it.
    pub pod_uid: Option<String>,
    /// Its Job.
    pub job_uid: Option<String>,
    /// When the receiver stored it.
    pub received_at: Time,
}

/// Reassembles and checks a stored result from its index and chunks.
pub fn assemble(index: &ConfigMap, chunks: &[ConfigMap]) -> Result<StoredResult, ReceiverError> {
    let name = index.metadata.name.clone().unwrap_or_default();
    let corrupt = |what: String| ReceiverError::Corrupt {
        name: name.clone(),
        what,
    };
    let data = index.data.clone().unwrap_or_default();
    let field = |k: &str| {
        data.get(k)
            .cloned()
            .ok_or_else(|| corrupt(format!("data.{k} is missing")))
    };
    let length: usize = field(key::LENGTH)?
        .parse()
        .map_err(|_| corrupt(format!("data.{} is not a number", key::LENGTH)))?;
    let count: usize = field(key::CHUNKS)?
        .parse()
        .map_err(|_| corrupt(format!("data.{} is not a number", key::CHUNKS)))?;
    if count != chunks.len() + 1 {
        return Err(corrupt(format!(
            "data.{}: {count} chunks recorded, {} found",
            key::CHUNKS,
            chunks.len() + 1
        )));
    }
    let piece = |cm: &ConfigMap| {
        cm.binary_data
            .as_ref()
            .and_then(|b| b.get(key::CHUNK))
            .map(|b| b.0.clone())
            .ok_or_else(|| {
                corrupt(format!(
                    "{}: binaryData.{} is missing",
                    cm.metadata.name.as_deref().unwrap_or_default(),
                    key::CHUNK
                ))
            })
    };
    let mut body = piece(index)?;
    for c in chunks {
        body.extend(piece(c)?);
    }
    if body.len() != length {
        return Err(corrupt(format!(
            "data.{}: {length} bytes recorded, {} found",
            key::LENGTH,
            body.len()
        )));
    }
    if content_sha256(&body) != field(key::SHA256)? {
        return Err(corrupt(format!(
            "data.{}: the SHA-256 of the bytes is not the one recorded",
            key::SHA256
        )));
    }
    let document: ResultDocument = crate::protocol::from_json::<ResultDocument>(&body)
        .map_err(|e| corrupt(format!("not a result document: {e}")))?;
    let op = document
        .operation
        .as_ref()
        .ok_or_else(|| corrupt("operation: the document has none".into()))?;
    if op.operation_id != field(key::OPERATION_ID)?
        || op.attempt.to_string() != field(key::ATTEMPT)?
    {
        return Err(corrupt(format!(
            "data.{}, data.{}: the document's operation is not the one the index records",
            key::OPERATION_ID,
            key::ATTEMPT
        )));
    }
    let received_at = field(key::RECEIVED_AT)?
        .parse::<Timestamp>()
        .map_err(|_| corrupt(format!("data.{} is not a time", key::RECEIVED_AT)))?;
    Ok(StoredResult {
        pod_uid: data.get(key::POD_UID).cloned(),
        job_uid: data.get(key::JOB_UID).cloned(),
        received_at: Time(received_at),
        document,
    })
}

/// The stored result of (operation, attempt), checked; `None` when none was
/// stored.
pub async fn harvest(
    client: &Client,
    namespace: &str,
    operation_id: &str,
    attempt: i32,
) -> Result<Option<StoredResult>, ReceiverError> {
    let name = result_name(operation_id, attempt).ok_or(ReceiverError::OperationId)?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Some(index) = api
        .get_opt(&name)
        .await
        .map_err(api_error(format!("reading ConfigMap {namespace}/{name}")))?
    else {
        return Ok(None);
    };
    let count: usize = index
        .data
        .as_ref()
        .and_then(|d| d.get(key::CHUNKS))
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    let mut chunks = Vec::new();
    for i in 1..count {
        let chunk = chunk_name(&name, i);
        let cm = api
            .get_opt(&chunk)
            .await
            .map_err(api_error(format!("reading ConfigMap {namespace}/{chunk}")))?
            .ok_or_else(|| ReceiverError::Corrupt {
                name: name.clone(),
                what: format!("chunk {chunk} is missing"),
            })?;
        chunks.push(cm);
    }
    assemble(&index, &chunks).map(Some)
}

/// Deletes every stored result of the operation (after the controller
/// recorded its outcome).
pub async fn discard(
    client: &Client,
    namespace: &str,
    operation_id: &str,
) -> Result<(), ReceiverError> {
    let hex = sha256_hex(operation_id).ok_or(ReceiverError::OperationId)?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let selector = format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={RESULT_COMPONENT},{LABEL_OPERATION_ID}={}",
        &hex[..16]
    );
    let list = api
        .list_metadata(&ListParams::default().labels(&selector))
        .await
        .map_err(api_error(format!("listing results in {namespace}")))?;
    let candidates = list.items.into_iter().map(|m| m.metadata);
    discard_among(client, namespace, operation_id, None, candidates).await
}

/// Whether `meta` is a stored result (or a chunk of one) of the operation.
pub fn is_result_of(meta: &ObjectMeta, operation_id: &str) -> bool {
    let labels = meta.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    // The label holds a prefix only: the annotation decides.
    let full = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_OPERATION_ID));
    label(LABEL_MANAGED_BY) == Some(MANAGED_BY)
        && label(LABEL_COMPONENT) == Some(RESULT_COMPONENT)
        && full.map(String::as_str) == Some(operation_id)
}

/// [`discard`] among `candidates`, the metadata of ConfigMaps in the
/// namespace (a watch's store, rather than a LIST), and the result of
/// `attempt` by its name, in case the store has not seen it yet.
pub async fn discard_among(
    client: &Client,
    namespace: &str,
    operation_id: &str,
    attempt: Option<i32>,
    candidates: impl IntoIterator<Item = ObjectMeta>,
) -> Result<(), ReceiverError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let named = attempt.and_then(|a| result_name(operation_id, a));
    let seen = candidates
        .into_iter()
        .filter(|meta| is_result_of(meta, operation_id))
        .filter_map(|meta| meta.name)
        .filter(|name| Some(name) != named.as_ref());
    for name in named.clone().into_iter().chain(seen) {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(api_error(format!("deleting ConfigMap {namespace}/{name}"))(
                    e,
                ));
            }
        }
    }
    Ok(())
}
