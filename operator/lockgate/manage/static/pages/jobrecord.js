// The job record's vocabulary the console shows: states, how a take ended, how long a record
// is kept. One copy of the Python definition (models/jobs.py JobStatus and TTL_DEFAULT_MS,
// store/records.py ATTEMPT_ENDS, store/keys.py RETENTION_*), which
// tests/test_record_definition.py checks under Node: a change there fails it until made here.

export const STATES = ["IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"];
export const FINAL = new Set(["COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"]);

// How one take of a job ended (its attempt history's `ended`), in words.
export const ENDED = {
  COMPLETED: "completed",
  FAILED: "failed: the handler's error",
  TIMED_OUT: "timed out: past its execution timeout",
  CANCELLED: "cancelled",
  WORKER_LOST: "worker lost: the job went back to the queue",
  GIVEN_BACK: "given back unrun: its worker was told to stop first",
};

export const RETENTION_SYNC_MS = 60 * 1000;
export const RETENTION_RUN_MS = 30 * 60 * 1000;
export const TTL_DEFAULT_MS = 24 * 60 * 60 * 1000;

/** "1 minute", "30 minutes". */
const minutes = (ms) => `${ms / 60000} minute${ms === 60000 ? "" : "s"}`;

export const RETENTION = `A job is listed while its record lives: a Run (/runsync) job for ${minutes(RETENTION_SYNC_MS)} after it `
  + `finishes, a Run async (/run) job for ${minutes(RETENTION_RUN_MS)}, never beyond its ttl (default ${TTL_DEFAULT_MS / 3600000} h). `
  + "Open a job to see its input and output while it is listed.";
