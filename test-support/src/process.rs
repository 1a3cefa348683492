//! Killing child processes as a crash does.

use std::process::Child;

/// `kill -9` of `child` (no chance to clean up, as in a crash), and reaps
/// it. A child that already exited is only reaped.
pub fn kill9(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        // SAFETY: kill(2) with a pid this process spawned and has not yet
        // reaped (try_wait just said it is running), so the pid cannot
        // name another process.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
        }
    }
    let _ = child.wait();
}

/// A child process a failing test does not leave behind: killed and reaped
/// when dropped.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        kill9(&mut self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_killed_child_died_of_sigkill() {
        let mut c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        kill9(&mut c);
        assert_eq!(c.wait().unwrap().signal(), Some(libc::SIGKILL));
        let c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = c.id() as libc::pid_t;
        drop(KillOnDrop(c));
        // SAFETY: kill(2) with signal 0 only asks whether the (reaped) pid
        // exists.
        assert_eq!(unsafe { libc::kill(pid, 0) }, -1, "reaped");
    }
}
