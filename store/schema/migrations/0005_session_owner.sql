-- Migration 5: who runs a session, so that a run killed without a chance
-- to say so (SIGKILL, the OOM killer, a power cut) is not 'running'
-- forever (docs/RELIABILITY.md, "Crash consistency").
--
-- A 'running' session's process is identified by the kernel boot it ran
-- under (/proc/sys/kernel/random/boot_id), its PID namespace
-- (/proc/self/ns/pid), its pid and the pid's start time (field 22 of
-- /proc/PID/stat, clock ticks after boot: a reused pid has another one).
-- Opening the database marks 'interrupted' every 'running' session whose
-- process is gone: same boot and namespace, and the pid is dead, a zombie
-- or started at another time; or another boot (SQLite's WAL only works
-- between processes of one kernel, so a writer of this file under another
-- boot is no longer writing to it). Sessions of another namespace are left
-- alone, and so are those written before this migration (owner NULL).

ALTER TABLE session ADD COLUMN owner_boot_id TEXT;     -- NULL: unknown (older tokbench)
ALTER TABLE session ADD COLUMN owner_pid_ns TEXT;      -- e.g. 'pid:[4026531836]'
ALTER TABLE session ADD COLUMN owner_pid INTEGER;
ALTER TABLE session ADD COLUMN owner_start_ticks INTEGER; -- /proc/PID/stat starttime
