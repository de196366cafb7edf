;; wasi_snapshot_preview1 for a sandbox with no outside world, used as the
;; component adapter of Go (wasip1) plugins in place of the real WASI adapter:
;; it imports nothing but the main module's memory, so the component imports
;; no wasi:* interface. No args, no environment, no preopened directories, a
;; fake clock, zero "randomness", stdout/stderr discarded, stdin empty, every
;; file/socket call refused (EBADF / ENOTCAPABLE), exit traps.
;; wit-component keeps only the functions the main module imports.
;; scripts/build-lang-plugins.sh assembles it (binaryen's wasm-as), embeds
;; an empty world (jco embed) and passes it to `jco new --adapt
;; wasi_snapshot_preview1=...`; docs/languages.md ("Go") has the contract.
(module
  (import "env" "memory" (memory 0))
  (global $now (mut i64) (i64.const 1000000000))

  ;; ---- process
  (func (export "args_get") (param i32 i32) (result i32) (i32.const 0))
  (func (export "environ_get") (param i32 i32) (result i32) (i32.const 0))
  (func (export "args_sizes_get") (param $n i32) (param $size i32) (result i32)
    (i32.store (local.get $n) (i32.const 0))
    (i32.store (local.get $size) (i32.const 0))
    (i32.const 0))
  (func (export "environ_sizes_get") (param $n i32) (param $size i32) (result i32)
    (i32.store (local.get $n) (i32.const 0))
    (i32.store (local.get $size) (i32.const 0))
    (i32.const 0))
  (func (export "proc_exit") (param i32) (unreachable))
  (func (export "proc_raise") (param i32) (result i32) (unreachable))
  (func (export "sched_yield") (result i32) (i32.const 0))

  ;; ---- time and randomness
  (func (export "clock_res_get") (param i32) (param $out i32) (result i32)
    (i64.store (local.get $out) (i64.const 1000))
    (i32.const 0))
  ;; every read advances the fake clock by 1µs
  (func (export "clock_time_get") (param i32 i64) (param $out i32) (result i32)
    (global.set $now (i64.add (global.get $now) (i64.const 1000)))
    (i64.store (local.get $out) (global.get $now))
    (i32.const 0))
  (func (export "random_get") (param $buf i32) (param $len i32) (result i32)
    (local $i i32)
    (block $done
      (loop $l
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (i32.store8 (i32.add (local.get $buf) (local.get $i)) (i32.const 0))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (i32.const 0))
  ;; every subscription fires at once; clock subscriptions advance the fake
  ;; clock by their timeout so that sleeps appear to have elapsed
  (func (export "poll_oneoff") (param $in i32) (param $out i32) (param $n i32) (param $nevents i32) (result i32)
    (local $i i32) (local $s i32) (local $e i32)
    (block $done
      (loop $l
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $s (i32.add (local.get $in) (i32.mul (local.get $i) (i32.const 48))))
        (local.set $e (i32.add (local.get $out) (i32.mul (local.get $i) (i32.const 32))))
        (i64.store (local.get $e) (i64.load (local.get $s)))                        ;; userdata
        (i32.store16 offset=8 (local.get $e) (i32.const 0))                         ;; errno
        (i32.store8 offset=10 (local.get $e) (i32.load8_u offset=8 (local.get $s))) ;; type
        (i64.store offset=16 (local.get $e) (i64.const 0))
        (i32.store16 offset=24 (local.get $e) (i32.const 0))
        (if (i32.eqz (i32.load8_u offset=8 (local.get $s)))
          (then (global.set $now (i64.add (global.get $now) (i64.load offset=24 (local.get $s))))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (i32.store (local.get $nevents) (local.get $n))
    (i32.const 0))

  ;; ---- file descriptors: 0, 1, 2 exist (character devices); nothing else
  (func $badfd (param $fd i32) (result i32) (i32.gt_u (local.get $fd) (i32.const 2)))
  (func (export "fd_write") (param $fd i32) (param $iovs i32) (param $n i32) (param $written i32) (result i32)
    (local $i i32) (local $sum i32)
    (if (i32.or (call $badfd (local.get $fd)) (i32.eqz (local.get $fd))) (then (return (i32.const 8))))
    (block $done
      (loop $l
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $sum (i32.add (local.get $sum)
          (i32.load offset=4 (i32.add (local.get $iovs) (i32.shl (local.get $i) (i32.const 3))))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
    (i32.store (local.get $written) (local.get $sum))   ;; discarded, reported written
    (i32.const 0))
  (func (export "fd_read") (param $fd i32) (param i32 i32) (param $nread i32) (result i32)
    (if (call $badfd (local.get $fd)) (then (return (i32.const 8))))
    (i32.store (local.get $nread) (i32.const 0))        ;; end of file
    (i32.const 0))
  (func (export "fd_fdstat_get") (param $fd i32) (param $out i32) (result i32)
    (if (call $badfd (local.get $fd)) (then (return (i32.const 8))))
    (i64.store (local.get $out) (i64.const 2))          ;; filetype character_device, flags 0
    (i64.store offset=8 (local.get $out) (i64.const -1))
    (i64.store offset=16 (local.get $out) (i64.const -1))
    (i32.const 0))
  (func (export "fd_fdstat_set_flags") (param $fd i32) (param i32) (result i32)
    (if (call $badfd (local.get $fd)) (then (return (i32.const 8))))
    (i32.const 0))
  (func (export "fd_close") (param $fd i32) (result i32)
    (if (call $badfd (local.get $fd)) (then (return (i32.const 8))))
    (i32.const 0))
  (func (export "fd_sync") (param i32) (result i32) (i32.const 0))
  (func (export "fd_datasync") (param i32) (result i32) (i32.const 0))
  (func (export "fd_prestat_get") (param i32 i32) (result i32) (i32.const 8))  ;; no preopens
  (func (export "fd_prestat_dir_name") (param i32 i32 i32) (result i32) (i32.const 8))
  (func (export "fd_advise") (param i32 i64 i64 i32) (result i32) (i32.const 8))
  (func (export "fd_allocate") (param i32 i64 i64) (result i32) (i32.const 8))
  (func (export "fd_fdstat_set_rights") (param i32 i64 i64) (result i32) (i32.const 8))
  (func (export "fd_filestat_get") (param i32 i32) (result i32) (i32.const 8))
  (func (export "fd_filestat_set_size") (param i32 i64) (result i32) (i32.const 8))
  (func (export "fd_filestat_set_times") (param i32 i64 i64 i32) (result i32) (i32.const 8))
  (func (export "fd_pread") (param i32 i32 i32 i64 i32) (result i32) (i32.const 8))
  (func (export "fd_pwrite") (param i32 i32 i32 i64 i32) (result i32) (i32.const 8))
  (func (export "fd_readdir") (param i32 i32 i32 i64 i32) (result i32) (i32.const 8))
  (func (export "fd_renumber") (param i32 i32) (result i32) (i32.const 8))
  (func (export "fd_seek") (param i32 i64 i32 i32) (result i32) (i32.const 70))  ;; ESPIPE
  (func (export "fd_tell") (param i32 i32) (result i32) (i32.const 70))

  ;; ---- paths and sockets: not capable
  (func (export "path_create_directory") (param i32 i32 i32) (result i32) (i32.const 76))
  (func (export "path_filestat_get") (param i32 i32 i32 i32 i32) (result i32) (i32.const 76))
  (func (export "path_filestat_set_times") (param i32 i32 i32 i32 i64 i64 i32) (result i32) (i32.const 76))
  (func (export "path_link") (param i32 i32 i32 i32 i32 i32 i32) (result i32) (i32.const 76))
  (func (export "path_open") (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32) (i32.const 76))
  (func (export "path_readlink") (param i32 i32 i32 i32 i32 i32) (result i32) (i32.const 76))
  (func (export "path_remove_directory") (param i32 i32 i32) (result i32) (i32.const 76))
  (func (export "path_rename") (param i32 i32 i32 i32 i32 i32) (result i32) (i32.const 76))
  (func (export "path_symlink") (param i32 i32 i32 i32 i32) (result i32) (i32.const 76))
  (func (export "path_unlink_file") (param i32 i32 i32) (result i32) (i32.const 76))
  (func (export "sock_accept") (param i32 i32 i32) (result i32) (i32.const 76))
  (func (export "sock_recv") (param i32 i32 i32 i32 i32 i32) (result i32) (i32.const 76))
  (func (export "sock_send") (param i32 i32 i32 i32 i32) (result i32) (i32.const 76))
  (func (export "sock_shutdown") (param i32 i32) (result i32) (i32.const 76))
)
