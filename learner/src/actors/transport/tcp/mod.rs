//! The TCP transport: remote actors over authenticated TCP, inside TLS 1.3 unless plaintext
//! was chosen ([`RemoteOptions::tls`]). The listener ([`server`]) runs on its own thread;
//! [`TcpTransport`] answers the registrations it hands over (checked like a local actor's)
//! and drains one link per registered connection, verified and counted by the run's
//! [`Ledger`] like a ring, with chunks a reconnect resends dropped as duplicates.

mod server;

pub use server::{
    wrong_rank, RemoteLink, RemoteOptions, RemoteRegistration, RemoteServer, PENDING_MAX,
};

use super::{Channel, Expected, Ledger, Received, SavedStates, Transport};

/// A registered remote actor's connection (its incarnation's chunks arrive through it).
struct Link {
    actor_id: u32,
    incarnation: u32,
    peer: String,
    link: RemoteLink,
    /// No chunk has arrived through this connection yet (the first one is logged).
    fresh: bool,
}

/// The TCP [`Transport`]: the listener and the registered connections.
pub struct TcpTransport {
    expected: Expected,
    server: RemoteServer,
    links: Vec<Link>,
    /// Registrations refused by this thread (the listener counts its own).
    refused_here: u64,
}

impl TcpTransport {
    /// Starts listening (`opts.listen`; an error names the address) and offers `initial_blob`
    /// to the actors that join.
    pub fn start(
        expected: Expected,
        opts: RemoteOptions,
        initial_blob: &[u8],
    ) -> anyhow::Result<Self> {
        let server = RemoteServer::start(opts)?;
        server.publish(initial_blob);
        Ok(TcpTransport {
            expected,
            server,
            links: Vec::new(),
            refused_here: 0,
        })
    }

    /// The address remote actors connect to (`tcp://HOST:PORT`).
    pub fn address(&self) -> String {
        format!("tcp://{}", self.server.local_addr())
    }

    /// Answers a remote actor's registration: checked like a local one's; a reconnect of a
    /// live incarnation replaces its old connection, whose queued chunks are taken first, and
    /// continues after the last chunk received.
    fn answer(&mut self, reg: RemoteRegistration, ledger: &mut Ledger, out: &mut Vec<Received>) {
        let who = format!(
            "remote actor {}/{} (pid {} on {:?}, {})",
            reg.actor_id, reg.incarnation, reg.pid, reg.host, reg.peer
        );
        if let Some(reason) = self.expected.mismatch(
            &reg.env,
            &reg.observation_space,
            &reg.action_space,
            &reg.schema,
        ) {
            tracing::error!("refused {who}: {reason}");
            self.refused_here += 1;
            let _ = reg.reply.send(Err(reason));
            return;
        }
        let key = (reg.actor_id, reg.incarnation);
        // The old connection of a reconnecting actor: everything it queued is taken before the
        // next sequence number is chosen, then it is closed (its late frames go nowhere).
        if let Some(i) = self
            .links
            .iter()
            .position(|l| (l.actor_id, l.incarnation) == key)
        {
            let mut old = self.links.swap_remove(i);
            while let Ok(bytes) = old.link.chunks.try_recv() {
                let chunk = ledger.accept(Channel::Link, key.0, key.1, &bytes);
                out.extend(chunk.map(|chunk| Received { chunk, saved: None }));
            }
        }
        let inc = ledger.incarnation(key.0, key.1);
        inc.remote = Some(reg.peer.to_string());
        if reg.resume {
            inc.reconnects += 1;
        }
        let next_seq = inc.last_seq.map_or(0, |s| s + 1);
        tracing::info!(
            "{who} {} at chunk {next_seq}",
            if reg.resume {
                "reconnected; continuing"
            } else {
                "registered; starting"
            }
        );
        if reg.reply.send(Ok(next_seq)).is_ok() {
            self.links.push(Link {
                actor_id: key.0,
                incarnation: key.1,
                peer: reg.peer.to_string(),
                link: reg.link,
                fresh: true,
            });
        }
    }
}

impl Transport for TcpTransport {
    /// Remote actors send no saved state (their outlet has no sync mode): none is restored.
    fn register(&mut self, _: &SavedStates, ledger: &mut Ledger, out: &mut Vec<Received>) {
        for reg in self.server.registrations.try_iter().collect::<Vec<_>>() {
            self.answer(reg, ledger, out);
        }
    }

    /// Receives every queued chunk of every link into `out`; drops the links whose connection
    /// ended (after taking what they queued).
    fn receive(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>) {
        use tokio::sync::mpsc::error::TryRecvError;
        self.links.retain_mut(|l| loop {
            match l.link.chunks.try_recv() {
                Ok(bytes) => {
                    let Some(chunk) =
                        ledger.accept(Channel::Link, l.actor_id, l.incarnation, &bytes)
                    else {
                        continue;
                    };
                    if std::mem::take(&mut l.fresh) {
                        tracing::info!(
                            "remote actor {}/{}: chunk {} received through {}",
                            l.actor_id,
                            l.incarnation,
                            chunk.meta.seq,
                            l.peer
                        );
                    }
                    out.push(Received { chunk, saved: None });
                }
                Err(TryRecvError::Empty) => break true,
                Err(TryRecvError::Disconnected) => {
                    tracing::info!(
                        "remote actor {}/{} ({}) disconnected",
                        l.actor_id,
                        l.incarnation,
                        l.peer
                    );
                    break false;
                }
            }
        });
    }

    fn publish(&mut self, _version: u64, blob: &[u8]) -> anyhow::Result<()> {
        self.server.publish(blob);
        Ok(())
    }

    fn open_ended(&self) -> bool {
        true
    }

    fn busy(&self) -> bool {
        !self.links.is_empty()
    }

    fn waiting_for(&self) -> Vec<String> {
        self.links
            .iter()
            .map(|l| format!("remote {}/{} ({})", l.actor_id, l.incarnation, l.peer))
            .collect()
    }

    fn refused(&self) -> u64 {
        self.refused_here + self.server.refused()
    }

    fn shut_down(&mut self) {
        self.server.shut_down();
    }

    fn refuse_registrations(&mut self) {
        for reg in self.server.registrations.try_iter() {
            let _ = reg.reply.send(Err("the run is ending".into()));
        }
    }

    fn abandon(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>) {
        self.receive(ledger, out);
        self.links.clear();
    }

    fn close(&mut self, ledger: &mut Ledger, out: &mut Vec<Received>) {
        self.abandon(ledger, out);
    }
}
