//! The user's side of every stage: the `kubectl ptah` plugin (plan, approve,
//! wait, refresh, set-source, schema, migration, history) and the health
//! rules that let Flux and Argo CD read a PtahSchema or PtahMigration.
