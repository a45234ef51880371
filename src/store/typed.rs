//! Typed helpers over the JSON-valued [`Store`]: get and list `Machine`s
//! instead of `Value`s.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Deleted, ListOptions, Store, StoreError};
use crate::api::{DiscoveredMachine, Kind, Machine, MachineClass, MachineSet};

/// A typed object the store keeps.
pub trait Object: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    const KIND: Kind;
}

impl Object for Machine {
    const KIND: Kind = Kind::Machine;
}
impl Object for MachineClass {
    const KIND: Kind = Kind::MachineClass;
}
impl Object for MachineSet {
    const KIND: Kind = Kind::MachineSet;
}
impl Object for DiscoveredMachine {
    const KIND: Kind = Kind::DiscoveredMachine;
}
impl Object for Secret {
    const KIND: Kind = Kind::Secret;
}
impl Object for crate::api::Event {
    const KIND: Kind = Kind::Event;
}
impl Object for k8s_openapi::api::coordination::v1::Lease {
    const KIND: Kind = Kind::Lease;
}
impl Object for k8s_openapi::api::core::v1::Namespace {
    const KIND: Kind = Kind::Namespace;
}

/// Turn a typed object into the JSON the store keeps, with apiVersion and kind.
pub fn to_value<T: Object>(obj: &T) -> Result<Value, StoreError> {
    let mut v = serde_json::to_value(obj).map_err(|e| StoreError::Malformed(e.to_string()))?;
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), T::KIND.api_version().into());
        m.insert("kind".into(), T::KIND.as_str().into());
    }
    Ok(v)
}

/// Decode a stored object.
pub fn from_value<T: Object>(v: Value) -> Result<T, StoreError> {
    serde_json::from_value(v).map_err(|e| StoreError::Malformed(format!("{}: {e}", T::KIND)))
}

/// Decode a stored object from its JSON bytes.
pub fn from_json<T: Object>(b: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(b).map_err(|e| StoreError::Malformed(format!("{}: {e}", T::KIND)))
}

/// Typed access, implemented for every [`Store`].
#[async_trait]
pub trait TypedStore {
    async fn get_obj<T: Object>(&self, namespace: &str, name: &str) -> Result<T, StoreError>;
    async fn list_obj<T: Object>(&self, opts: &ListOptions) -> Result<Vec<T>, StoreError>;
    async fn create_obj<T: Object>(&self, obj: &T) -> Result<T, StoreError>;
    async fn update_obj<T: Object>(&self, obj: &T) -> Result<T, StoreError>;
    async fn update_status_obj<T: Object>(&self, obj: &T) -> Result<T, StoreError>;
    async fn delete_obj<T: Object>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Deleted, StoreError>;
}

#[async_trait]
impl<S: Store + ?Sized> TypedStore for S {
    async fn get_obj<T: Object>(&self, namespace: &str, name: &str) -> Result<T, StoreError> {
        from_json(&self.get_json(T::KIND, namespace, name).await?)
    }
    async fn list_obj<T: Object>(&self, opts: &ListOptions) -> Result<Vec<T>, StoreError> {
        self.list(T::KIND, opts)
            .await?
            .items
            .into_iter()
            .map(from_value)
            .collect()
    }
    async fn create_obj<T: Object>(&self, obj: &T) -> Result<T, StoreError> {
        from_value(self.create(T::KIND, to_value(obj)?).await?)
    }
    async fn update_obj<T: Object>(&self, obj: &T) -> Result<T, StoreError> {
        from_value(self.update(T::KIND, to_value(obj)?).await?)
    }
    async fn update_status_obj<T: Object>(&self, obj: &T) -> Result<T, StoreError> {
        from_value(self.update_status(T::KIND, to_value(obj)?).await?)
    }
    async fn delete_obj<T: Object>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Deleted, StoreError> {
        self.delete(T::KIND, namespace, name).await
    }
}
