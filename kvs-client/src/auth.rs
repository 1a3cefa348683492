//! Where a client's tokens come from: a file, or the environment. A data
//! client presents the auth token ([`auth_token`]); kvs-admin, the cluster
//! token ([`cluster_token`]).

use std::path::Path;

use kvs_proto::{AuthToken, TokenError};

/// The environment variable a client takes its auth token from when no token
/// file is given (the token itself, not a path).
pub const AUTH_TOKEN_ENV: &str = "KVS_AUTH_TOKEN";

/// The environment variable kvs-admin takes the cluster token from when no
/// token file is given.
pub const CLUSTER_TOKEN_ENV: &str = "KVS_CLUSTER_TOKEN";

/// The token in `file` (which must be private to its owner) if one is named,
/// else the one in [`AUTH_TOKEN_ENV`] if that is set and not empty, else none.
pub fn auth_token(file: Option<&Path>) -> Result<Option<AuthToken>, TokenError> {
    token(file, AUTH_TOKEN_ENV)
}

/// The cluster token: as [`auth_token`], from `file` or else
/// [`CLUSTER_TOKEN_ENV`].
pub fn cluster_token(file: Option<&Path>) -> Result<Option<AuthToken>, TokenError> {
    token(file, CLUSTER_TOKEN_ENV)
}

fn token(file: Option<&Path>, env: &str) -> Result<Option<AuthToken>, TokenError> {
    if let Some(f) = file {
        return AuthToken::from_file(f).map(Some);
    }
    match std::env::var_os(env) {
        Some(v) if !v.is_empty() => {
            use std::os::unix::ffi::OsStrExt;
            AuthToken::new(v.as_bytes()).map(Some)
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test of this crate that touches the environment.
    #[test]
    fn a_file_comes_before_the_environment_which_comes_before_nothing() {
        std::env::remove_var(AUTH_TOKEN_ENV);
        assert!(auth_token(None).unwrap().is_none());
        std::env::set_var(AUTH_TOKEN_ENV, "");
        assert!(auth_token(None).unwrap().is_none());
        std::env::set_var(AUTH_TOKEN_ENV, "from-env\n");
        assert_eq!(auth_token(None).unwrap().unwrap().expose(), b"from-env");
        let dir = std::env::temp_dir().join(format!("kvs-client-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "from-file").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert_eq!(
            auth_token(Some(&f)).unwrap().unwrap().expose(),
            b"from-file"
        );
        // A named file that is missing is an error, not a fall back.
        assert!(auth_token(Some(&dir.join("none"))).is_err());
        std::env::remove_var(AUTH_TOKEN_ENV);
        // The cluster token has its own variable.
        std::env::set_var(CLUSTER_TOKEN_ENV, "cluster-env");
        assert!(auth_token(None).unwrap().is_none());
        assert_eq!(
            cluster_token(None).unwrap().unwrap().expose(),
            b"cluster-env"
        );
        std::env::remove_var(CLUSTER_TOKEN_ENV);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
