/* worker/spill: the memory tiers of gworker below the backend's memory, and the policy that
 * moves chunks between them. The rest of the worker uses only this header.
 *
 * Tiers. A stored chunk lives in the backend's memory (the "memory" tier: host memory for the
 * cpu backend, bounded by the worker's memory limit) or in a file of the worker's local
 * directory (the "disk" tier, bounded by the disk limit and by the file system). Chunks are
 * immutable, so a chunk read back from disk (or whose write finished while it was in use) keeps
 * its file: it is "clean", and evicting it again frees its memory without any I/O. Its file is
 * deleted when the chunk is freed (released by gsched, its graph canceled, the worker stopped);
 * disk usage counts every file, also those of clean chunks in memory.
 *
 * Policy (Dask's memory fractions, of the memory limit):
 *  - threshold (default 0.7): after every loop iteration, when the memory held by stored chunks
 *    not already on their way to disk exceeds threshold * limit, chunks are written to disk,
 *    least recently used first, until it is back at target (default 0.6);
 *  - a task that does not fit (admission) makes room the same way, down to what it needs;
 *  - pause (default 0.75): tasks without inputs (generators) are admitted only while they fit
 *    under pause * limit, so consumers of stored chunks always find room.
 * Only owned keys that nothing else references are moved: inputs of admitted or running tasks,
 * chunks being sent and fetched copies are pinned by their references.
 *
 * A chunk on disk that a task needs comes back at admission (the memory for it is part of what
 * the task needs); the task waits for it like for a fetched input, so kernels of other tasks
 * run meanwhile. Peers and gsched get a chunk on disk through gs__wspill_read() (serve.c).
 *
 * I/O. Every file operation runs on libuv's thread pool (uv_queue_work): the loop never blocks
 * on the disk. Each operation holds a reference of its chunk and keeps the worker's stop waiting
 * (nhandles_open) until it has finished. The local directory is a fresh subdirectory
 * (gsched-worker-<name>-XXXXXX) of --local-directory (default: $TMPDIR, else /tmp), created at
 * gs_worker_create() and removed with its files when the worker is destroyed.
 *
 * Errors. A chunk that cannot be written (file system full, disk limit, I/O error) stays in
 * memory: nothing is lost. When the worker then cannot make room for a task and nothing else
 * could free memory, the task fails with a message naming the worker, the tier, the sizes and
 * the limit (GS_ERR_NO_RESOURCE for the disk tier).
 *
 * Host tier (streams mode, a backend with to_host/to_device: "cuda"). For a worker whose
 * chunks live in device memory, the tier below is host memory instead of the disk: the same
 * policy (threshold, target, pause of the device limit; LRU; pinned chunks skipped) copies
 * chunks device -> host on a stream of its own, completion coming back through the worker's
 * notes (never blocking the loop); a task's inputs there come back on a second stream (one copy
 * engine each way) at admission, or earlier (gs__wspill_prefetch). Host copies are pieces of a
 * recycled pool of page-locked memory (hpool.c), so a move is one DMA straight into or out of
 * the copy (ops->copy_to_host / copy_from_host); the pool is page-locked by threads of its own,
 * ahead of demand (from half the target on; a quarter of the device limit, at most 4 GiB,
 * kept free), never beyond the host limit and never given back before the worker goes; a copy
 * that finds no free piece is pageable memory moved with ops->to_host / to_device (staged
 * by the backend) instead. The host copy is kept while the chunk lives (a clean copy, like a
 * file), bounded by the host limit (gs_worker_params_t.host_limit); peers and gsched are served
 * from it (a memcpy on the thread pool).
 *
 * Disk below the host tier (cascade.c). A streams-mode worker also has its local directory.
 * When the host copies would pass the host limit (a device -> host move blocked by it, or
 * after a loop iteration above the threshold fraction of the host limit), host copies go to
 * files, least recently used first (a second LRU, of chunks with a host copy): a copy whose
 * chunk also has a file or is on the device is just freed; otherwise its host copy is written
 * to a new file on the thread pool (the source stays valid: loads and peers may read it
 * meanwhile), then freed, and the chunk is on the disk tier. A chunk on disk that a task needs
 * is read into a new host copy (a pool piece, outside the limit while in flight; it keeps its
 * file, so it is clean) then copied to the device as above. Peers are served from the file.
 * The disk tier's limits and failures are those of a cpu worker: when neither host memory nor
 * the disk can take more, the task that cannot get device memory fails with a message naming
 * the worker, the disk tier, the sizes and the limit (GS_ERR_NO_RESOURCE). Host -> disk moves
 * count in the disk tier's counters (spills, spilled_bytes, spilled_ns; unspill* for reads).
 *
 * Threads: everything here runs on the loop thread. */
#ifndef GS_WORKER_SPILL_H
#define GS_WORKER_SPILL_H

#include <gsched/status.h>
#include <stdint.h>

struct gs_worker;
struct gs_wchunk;
struct gs_worker_params;

typedef enum gs_wtier {
    GS_WTIER_MEM = 0,          /* data valid at the chunk's ptr */
    GS_WTIER_DISK = 1,         /* data only in its file (ptr NULL, or being read into) */
    GS_WTIER_HOST = 2          /* data only in host memory (sp.host; ptr NULL, or being copied
                                  into): the tier below a device's memory */
} gs_wtier_t;

typedef enum gs_wspill_io {
    GS_WSPILL_IO_NONE = 0,
    GS_WSPILL_IO_WRITE = 1,    /* being written to its file / copied to the host tier
                                  (still in memory) */
    GS_WSPILL_IO_READ = 2      /* being read back (memory allocated, not valid yet) */
} gs_wspill_io_t;

/* Per-chunk state, embedded in gs_wchunk_t (zero: in memory, no file, not tracked). */
typedef struct gs_wspill_chunk {
    struct gs_wspill_chunk *prev, *next;  /* LRU of stored keys in memory (when in_lru) */
    uint64_t file;             /* file number in the local directory; 0: no file */
    void *host;                /* host tier: the chunk's copy in host memory (a host pool
                                  piece, or gs_malloc'd: host_pooled; kept while the chunk
                                  lives, like a file); NULL: none */
    uint8_t tier;              /* gs_wtier_t */
    uint8_t io;                /* gs_wspill_io_t */
    uint8_t in_lru;
    uint8_t host_pooled;       /* host is a piece of the host pool (page-locked), not
                                  gs_malloc'd */
    uint8_t in_hlru;
    uint8_t hio;               /* its host copy is being written to its file (cascade.c) */
    struct gs_wspill_chunk *hprev, *hnext;  /* LRU of chunks with a host copy (when in_hlru) */
} gs_wspill_chunk_t;

/** Called on the loop when gs__wspill_read() finished (GS_OK: the bytes are at dst). */
typedef void (*gs_wspill_read_cb)(struct gs_worker *w, gs_status_t status, void *arg);

/** Configure the tiers from @a p (fractions, local directory, disk limit) and create the local
 *  directory. GS_ERR_INVALID_PARAM for bad fractions, GS_ERR_IO naming the directory when it
 *  cannot be created or written, GS_ERR_NO_MEMORY. On error nothing is left behind. */
gs_status_t gs__wspill_init(struct gs_worker *w, const struct gs_worker_params *p);
/** Remove the local directory and its files (destroy, after every chunk was freed). */
void gs__wspill_cleanup(struct gs_worker *w);
/** Nonzero while file operations are in flight (their completion may free memory). */
int gs__wspill_busy(const struct gs_worker *w);

/** @a c became a stored key in memory (or came back from disk): it may be spilled, after the
 *  chunks used before it. */
void gs__wspill_track(struct gs_worker *w, struct gs_wchunk *c);
/** @a c was used: it goes last in the eviction order. */
void gs__wspill_touch(struct gs_worker *w, struct gs_wchunk *c);
/** @a c leaves the store or is freed: forget it (and delete its file when @a freeing). */
void gs__wspill_forget(struct gs_worker *w, struct gs_wchunk *c, int freeing);

/** Start moving chunks to disk until @a need more bytes fit under @a cap. GS_OK: they fit now;
 *  GS_INPROGRESS: writes are in flight (gs__wmem_freed follows); GS_ERR_NO_RESOURCE /
 *  GS_ERR_IO / GS_ERR_NO_MEMORY with a message (worker, tier, sizes, limit) when nothing more
 *  can go to disk; GS_ERR_UNSUPPORTED when spilling is off. */
gs_status_t gs__wspill_make_room(struct gs_worker *w, uint64_t need, uint64_t cap);
/** Spill down to the target when above the threshold (called every loop iteration; cheap). */
void gs__wspill_maybe(struct gs_worker *w);
/** The limit below which generators are admitted (pause fraction of the memory limit). */
uint64_t gs__wspill_pause_cap(const struct gs_worker *w);

/** Bring @a c (a stored key on disk, not being read) back: allocates its memory (accounted),
 *  then reads its file off the loop; gs__wexec_input_ready() (or gs__wexec_input_failed())
 *  follows on the loop. GS_ERR_NO_MEMORY / GS_ERR_NO_DEVICE_MEMORY when the memory is refused
 *  (nothing changed). */
gs_status_t gs__wspill_load(struct gs_worker *w, struct gs_wchunk *c);
/** Copy the bytes of @a c (on disk) into @a dst (caller-owned, c->nbytes, valid until @a cb)
 *  off the loop, without bringing @a c back to memory. @a c must stay referenced by the caller
 *  until @a cb. GS_OK: @a cb follows exactly once; otherwise it is never called. */
gs_status_t gs__wspill_read(struct gs_worker *w, struct gs_wchunk *c, void *dst,
                            gs_wspill_read_cb cb, void *arg);

/** Bring up, ahead of admission, the inputs of queued tasks (the first 64) that are on the
 *  lower tier while the memory stays under the threshold fraction (so that the policy does not
 *  move them down again): their copies overlap the kernels of running tasks. Not while
 *  admission waits for memory. Called from gs__wexec_pump. */
void gs__wspill_prefetch(struct gs_worker *w);
/** Name of the tier of the backend's memory ("device" in streams mode, else "memory") and of
 *  the tier below it ("host" or "disk"). */
const char *gs__wspill_upper_name(const struct gs_worker *w);
const char *gs__wspill_lower_name(const struct gs_worker *w);

/** Fill the host pool's fields of @a st (host_pool_*); nothing without a host tier. */
struct gs_worker_stats;
void gs__wspill_host_stats(const struct gs_worker *w, struct gs_worker_stats *st);

/** Message of the last disk-tier failure ("" when none since the last success). */
const char *gs__wspill_last_error(const struct gs_worker *w);

#endif
