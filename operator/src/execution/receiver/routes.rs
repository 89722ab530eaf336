//! The HTTP side: the result and plan routes of the manager's listener.

use super::*;

/// The receiver: checks a posted result against the claim and stores it.
pub struct Receiver {
    client: Client,
    tokens: PodTokens,
    inbox: Arc<Inbox>,
}

/// How a result was received.
#[derive(Debug, PartialEq, Eq)]
pub enum Receipt {
    /// Stored, under this index ConfigMap.
    Stored(String),
    /// Handed over, and its outcome recorded in status.
    Recorded,
}

impl Receiver {
    /// A receiver checking Pods' tokens against the keys of the API server
    /// `client` reaches, handing reads' results over through `inbox`.
    pub fn new(client: Client, inbox: Arc<Inbox>) -> Self {
        Receiver {
            tokens: PodTokens::new(client.clone()),
            client,
            inbox,
        }
    }

    /// The handler for [`RESULTS_PATH`] on [`crate::server::serve`].
    pub fn handler(self: Arc<Self>) -> crate::server::Handler {
        Arc::new(move |req| {
            let me = self.clone();
            Box::pin(async move {
                match me.receive(req).await {
                    Ok(Receipt::Stored(name)) => answered(
                        StatusCode::OK,
                        Answer {
                            reason: REASON_STORED.into(),
                            message: format!("stored as ConfigMap {name}"),
                        },
                    ),
                    Ok(Receipt::Recorded) => answered(
                        StatusCode::OK,
                        Answer {
                            reason: REASON_RECORDED.into(),
                            message: "the outcome is recorded in status".into(),
                        },
                    ),
                    Err(r) => refused(r),
                }
            })
        })
    }

    /// The handler for [`PLANS_PATH`] on [`crate::server::serve`]: the
    /// plan's bytes, or a JSON [`Answer`] saying why not.
    pub fn plan_handler(self: Arc<Self>) -> crate::server::Handler {
        Arc::new(move |req| {
            let me = self.clone();
            Box::pin(async move {
                match me.plan_bytes(req).await {
                    Ok(plan) => {
                        let mut response = Response::new(Bytes::from(plan.bytes));
                        let headers = response.headers_mut();
                        headers.insert(
                            header::CONTENT_TYPE,
                            header::HeaderValue::from_static("application/octet-stream"),
                        );
                        for (name, value) in [
                            (CONTENT_SHA256_HEADER, plan.sha256),
                            (PLAN_NAME_HEADER, plan.name),
                            (PLAN_FINGERPRINT_HEADER, plan.fingerprint),
                        ] {
                            if let Ok(v) = header::HeaderValue::from_str(&value) {
                                headers.insert(name, v);
                            }
                        }
                        response
                    }
                    Err(r) => refused(r),
                }
            })
        })
    }

    /// Checks one plan request against the token, the claim, `status.plan`
    /// and the Pod, then reads the plan back (every chunk and digest
    /// checked).
    pub async fn plan_bytes(&self, req: Request<Bytes>) -> Result<PlanBytes, Refusal> {
        let request = check_plan_request(&req)?;
        let r = &request.resource;
        self.tokens.verify(&request.token).await?.check(
            &r.namespace,
            &request.pod_name,
            &request.pod_uid,
        )?;
        let schema = match r.kind.as_str() {
            "PtahSchema" => {
                let api: Api<PtahSchema> = Api::namespaced(self.client.clone(), &r.namespace);
                api.get_opt(&r.name)
                    .await
                    .map_err(|e| unavailable("reading the PtahSchema", &e))?
                    .ok_or_else(|| {
                        conflict(
                            "NotClaimed",
                            format!("PtahSchema {}/{} does not exist", r.namespace, r.name),
                        )
                    })?
            }
            // A migration's Apply runs its approved sequence from the
            // fetched source: there are no plan bytes to hand out.
            "PtahMigration" => {
                return Err(refuse(
                    StatusCode::NOT_FOUND,
                    "NoPlanBytes",
                    "a PtahMigration's plan is a sequence of versions, not bytes",
                ));
            }
            _ => {
                return Err(bad("Path", "the kind must be PtahSchema or PtahMigration"));
            }
        };
        let status = schema.status.as_ref();
        let claimed =
            check_apply_claim(status.and_then(|s| s.active_operation.as_ref()), &request)?;
        let content_digest = check_current_plan(status.and_then(|s| s.plan.as_ref()), &claimed)?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &r.namespace);
        let pod = pods
            .get_opt(&request.pod_name)
            .await
            .map_err(|e| unavailable("reading the Pod", &e))?
            .ok_or_else(|| {
                conflict(
                    "PodMismatch",
                    "the Pod X-Ptah-Pod-Name names does not exist",
                )
            })?;
        check_plan_pod(&pod, &request, &claimed)?;
        let bytes = plan::read_back(&self.client, &r.namespace, &claimed.name, &content_digest)
            .await
            .map_err(|e| plan_refusal(&e))?;
        Ok(PlanBytes {
            name: claimed.name,
            fingerprint: claimed.fingerprint,
            bytes,
            sha256: content_digest,
        })
    }

    /// Checks one result, then hands it over (a read) or stores it.
    pub async fn receive(&self, req: Request<Bytes>) -> Result<Receipt, Refusal> {
        let received = check_request(&req)?;
        let op = &received.operation;
        let namespace = op.resource.namespace.as_str();
        let (Some(pod_name), Some(pod_uid)) = (op.pod_name.as_deref(), op.pod_uid.as_deref())
        else {
            return Err(bad(
                "Document",
                "operation.podName and operation.podUid are required",
            ));
        };
        self.tokens
            .verify(&received.token)
            .await?
            .check(namespace, pod_name, pod_uid)?;
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let index_name = result_name(&op.operation_id, op.attempt)
            .ok_or_else(|| bad("Document", "operation.operationId must be sha256:<64 hex>"))?;
        // A replay is answered before anything else is read.
        if let Some(stored) = configmaps
            .get_opt(&index_name)
            .await
            .map_err(|e| unavailable("reading the stored result", &e))?
        {
            return Err(replay(&stored, &received.sha256));
        }
        let (owner, claim) = self.claim_of(op).await?;
        let claimed = check_claim(claim.as_ref(), op);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = pods
            .get_opt(pod_name)
            .await
            .map_err(|e| unavailable("reading the Pod", &e))?;
        if let Err(refusal) = claimed {
            // A preview's result answers no claim: it is checked against
            // its Job and preview, and stored for the plugin, never handed
            // over.
            return match pod.filter(is_preview_pod) {
                Some(pod) => {
                    let job = self.preview_job(op, &pod).await?;
                    self.store(&job, op, req.body(), &received.sha256, Timestamp::now())
                        .await
                }
                None => Err(refusal),
            };
        }
        let pod = pod.ok_or_else(|| {
            conflict(
                "PodMismatch",
                "the Pod operation.podName names does not exist",
            )
        })?;
        let job_name = claim
            .as_ref()
            .and_then(|c| c.job_name.clone())
            .unwrap_or_default();
        let job = check_pod(&pod, op, &job_name)?;

        let read = claim
            .as_ref()
            .is_some_and(|c| c.type_ != OperationType::Apply);
        let received_at = Timestamp::now();
        if read {
            let to = Addressee {
                kind: op.resource.kind.clone(),
                namespace: namespace.to_string(),
                name: op.resource.name.clone(),
            };
            let result = StoredResult {
                document: received.document.clone(),
                pod_uid: op.pod_uid.clone(),
                job_uid: op.job_uid.clone(),
                received_at: Time(received_at),
            };
            let sha = &received.sha256;
            let handed = self.inbox.hand_over(
                &to,
                &op.operation_id,
                op.attempt,
                sha,
                result,
                HAND_OVER_WAIT,
            );
            match handed.await {
                HandOver::Recorded => return Ok(Receipt::Recorded),
                HandOver::Conflict => {
                    return Err(conflict(
                        "Replay",
                        "a different result is held for this operation and attempt",
                    ));
                }
                HandOver::NotTaken => {}
            }
        }
        // A read's stored result goes with its Job (collected by the Job's
        // TTL); an Apply's stays the resource's until the sweep.
        let owner = if read { job } else { owner };
        self.store(&owner, op, req.body(), &received.sha256, received_at)
            .await
    }

    /// Stores a checked result owned by `owner`: the chunks, then the index
    /// (the commit); a second result for the same operation and attempt is
    /// a replay.
    async fn store(
        &self,
        owner: &OwnerReference,
        op: &OperationRef,
        body: &[u8],
        sha256: &str,
        received_at: Timestamp,
    ) -> Result<Receipt, Refusal> {
        let namespace = op.resource.namespace.as_str();
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let (index, chunks) = result_objects(namespace, owner, op, body, received_at)
            .ok_or_else(|| bad("Document", "operation.operationId must be sha256:<64 hex>"))?;
        let index_name = index.metadata.name.clone().unwrap_or_default();
        let pp = PostParams::default();
        for chunk in &chunks {
            match configmaps.create(&pp, chunk).await {
                Ok(_) => {}
                // Left by an earlier attempt that stopped before its index:
                // the same bytes may go on, others may not.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let name = chunk.metadata.name.as_deref().unwrap_or_default();
                    let existing = configmaps
                        .get(name)
                        .await
                        .map_err(|e| unavailable("reading a stored chunk", &e))?;
                    if existing.binary_data != chunk.binary_data {
                        return Err(conflict(
                            "Replay",
                            "a different result was stored for this operation and attempt",
                        ));
                    }
                }
                Err(e) => return Err(unavailable("storing a result chunk", &e)),
            }
        }
        match configmaps.create(&pp, &index).await {
            Ok(_) => Ok(Receipt::Stored(index_name)),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let stored = configmaps
                    .get(&index_name)
                    .await
                    .map_err(|e| unavailable("reading the stored result", &e))?;
                Err(replay(&stored, sha256))
            }
            Err(e) => Err(unavailable("storing the result", &e)),
        }
    }

    /// The preview Job the Pod belongs to, checked against the preview
    /// ConfigMap that owns it ([`preview::check`]); answered as the owner
    /// of the stored result.
    async fn preview_job(&self, op: &OperationRef, pod: &Pod) -> Result<OwnerReference, Refusal> {
        let namespace = op.resource.namespace.as_str();
        let job_name = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Job" && o.controller == Some(true))
            .map(|o| o.name.clone())
            .unwrap_or_default();
        let owner = check_pod(pod, op, &job_name)?;
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        let job = jobs
            .get_opt(&job_name)
            .await
            .map_err(|e| unavailable("reading the preview Job", &e))?
            .ok_or_else(|| conflict("PodMismatch", "the Pod's preview Job does not exist"))?;
        let preview_name = job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(preview::PREVIEW_LABEL))
            .cloned()
            .unwrap_or_default();
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let cm = configmaps
            .get_opt(&preview_name)
            .await
            .map_err(|e| unavailable("reading the preview", &e))?
            .ok_or_else(|| conflict("NotClaimed", "the preview ConfigMap does not exist"))?;
        preview::check(op, &job, &cm).map_err(|why| conflict("NotClaimed", why))?;
        Ok(owner)
    }

    /// The owner reference and claim of the resource the document names.
    async fn claim_of(
        &self,
        op: &OperationRef,
    ) -> Result<(OwnerReference, Option<ActiveOperation>), Refusal> {
        let r = &op.resource;
        let gone = || {
            conflict(
                "NotClaimed",
                format!("{} {}/{} does not exist", r.kind, r.namespace, r.name),
            )
        };
        let (meta, claim, kind, api_version) = match r.kind.as_str() {
            "PtahSchema" => {
                let api: Api<PtahSchema> = Api::namespaced(self.client.clone(), &r.namespace);
                let s = api
                    .get_opt(&r.name)
                    .await
                    .map_err(|e| unavailable("reading the PtahSchema", &e))?
                    .ok_or_else(gone)?;
                let claim = s.status.as_ref().and_then(|st| st.active_operation.clone());
                (
                    s.metadata,
                    claim,
                    PtahSchema::kind(&()),
                    PtahSchema::api_version(&()),
                )
            }
            "PtahMigration" => {
                let api: Api<PtahMigration> = Api::namespaced(self.client.clone(), &r.namespace);
                let m = api
                    .get_opt(&r.name)
                    .await
                    .map_err(|e| unavailable("reading the PtahMigration", &e))?
                    .ok_or_else(gone)?;
                let claim = m.status.as_ref().and_then(|st| st.active_operation.clone());
                (
                    m.metadata,
                    claim,
                    PtahMigration::kind(&()),
                    PtahMigration::api_version(&()),
                )
            }
            _ => {
                return Err(bad(
                    "Document",
                    "operation.resource.kind must be PtahSchema or PtahMigration",
                ));
            }
        };
        let uid = meta.uid.clone().unwrap_or_default();
        if uid != op.resource_uid {
            return Err(conflict(
                "NotClaimed",
                "operation.resourceUid is not the resource's UID",
            ));
        }
        let owner = OwnerReference {
            api_version: api_version.into_owned(),
            kind: kind.into_owned(),
            name: r.name.clone(),
            uid,
            controller: None,
            block_owner_deletion: None,
        };
        Ok((owner, claim))
    }
}

/// Whether the Pod is a preview's (its Job's label, copied to the Pod; the
/// Job and the preview are checked after).
fn is_preview_pod(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_COMPONENT))
        .is_some_and(|c| c == preview::COMPONENT)
}

/// The refusal of a second result for a stored (operation, attempt).
pub(super) fn replay(stored: &ConfigMap, sha256: &str) -> Refusal {
    let same = stored
        .data
        .as_ref()
        .and_then(|d| d.get(key::SHA256))
        .is_some_and(|s| s == sha256);
    if same {
        conflict(
            REASON_ALREADY_STORED,
            "this result was already stored for this operation and attempt",
        )
    } else {
        conflict(
            "Replay",
            "a result was already stored for this operation and attempt",
        )
    }
}

/// `answer` as the JSON body of a response with `status`.
fn answered(status: StatusCode, answer: Answer) -> Response<Bytes> {
    let body = serde_json::to_vec(&answer).unwrap_or_default();
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A refusal as its JSON [`Answer`].
fn refused(r: Refusal) -> Response<Bytes> {
    let answer = Answer {
        reason: r.reason.into(),
        message: r.message,
    };
    answered(r.status, answer)
}
