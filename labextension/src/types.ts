/**
 * What the server extension and the kernel send the panel: the REST and comm shapes
 * (docs/server.md, docs/rest-contract.md), plus the panel's own settings types.
 */

export type NvmlState = 'ok' | 'no_library' | 'no_driver' | 'no_permission' | 'error';

export interface ProcessInfo {
  pid: number;
  /** null when NVML does not report memory per process (MIG). */
  used: number | null;
  /** host_pid: a pid that is not a process here (a container sees the host's pids), on a GPU
   * where some kernel's pid is not listed: it may be that kernel. */
  kind: 'kernel' | 'other' | 'host_pid';
  kernel_id: string | null;
  kernel_name: string | null;
  notebook_path: string | null;
  execution_state: string | null;
  /** jupyter_server's last message to or from the kernel, ISO 8601 UTC; null or absent when unknown. */
  last_activity?: string | null;
  preallocated: boolean | null;
  /** The command line; null when unknown or withheld (`name_hidden`). */
  name: string | null;
  /** True when another user's command line is withheld (the server's `show_other_users` is off). */
  name_hidden?: boolean;
  user: string | null;
  /** In replay: the trace's placeholder pid this live kernel stands in for. */
  replay_placeholder_pid?: number;
  /** The server will shut this kernel down for holding GPU memory while idle (GpuMem.cull_idle_after). */
  pending_cull?: PendingCull | null;
}

export interface PendingCull {
  /** POSIX seconds: the kernel's last activity plus GpuMem.cull_idle_after. */
  cull_at: number;
  idle_seconds: number;
  held_bytes: number;
  /** [GPU index, bytes], most first; absent from older servers. */
  per_device?: [number, number][];
  /** "this kernel holds 30.00 GiB of GPU 2 and has been idle 55 min; it will be shut down in 5 min" */
  message: string;
}

/** A kernel the server shut down for holding GPU memory while idle (the devices reply's `recent_culls`). */
export interface CullRecord {
  kernel_id: string;
  notebook_path: string | null;
  /** What NVML said it held at the last reading before the shutdown. */
  freed_bytes: number;
  per_device: [number, number][];
  /** POSIX seconds, the server's clock. */
  culled_at: number;
  idle_seconds: number;
  /** GpuMem.cull_idle_after then. */
  idle_after: number;
  reason: string;
}

interface DeviceCommon {
  index: number;
  pids_visible: boolean;
  pids_reason: string | null;
  this_kernel_bytes: number;
  kernels_bytes: number;
  other_bytes: number;
  /** Memory of the `host_pid` processes: a kernel's, or another process's; it cannot tell. */
  host_pid_bytes: number;
  processes: ProcessInfo[];
}

/** A GPU NVML could read: every byte count is a number. */
export interface ReadableDevice extends DeviceCommon {
  readable: true;
  name: string;
  uuid: string;
  total: number;
  used: number;
  free: number;
  /** What the driver keeps for itself (NVML memory_v2); null or absent where not reported. */
  reserved?: number | null;
  utilization: number | null;
  display_active: boolean | null;
  mig: boolean | null;
  reason: null;
}

/** A GPU NVML lists but cannot read (a lost GPU): no numbers, and a reason. */
export interface UnreadableDevice extends DeviceCommon {
  readable: false;
  name: string | null;
  uuid: string | null;
  total: null;
  used: null;
  free: null;
  reserved?: null;
  utilization: null;
  display_active: null;
  mig: null;
  reason: string | null;
}

export type DeviceInfo = ReadableDevice | UnreadableDevice;

export interface OvercommitWarning {
  kind: string;
  device: number;
  message: string;
  kernels: string[];
  suggested_fraction: number | null;
}

export interface DevicesReply {
  t: number;
  source: 'nvml' | 'replay';
  synthetic: boolean;
  state: NvmlState;
  reason: string | null;
  poll_interval: number;
  devices: DeviceInfo[];
  warnings: OvercommitWarning[];
  /** The culls of the last hour, newest first; absent from older servers. */
  recent_culls?: CullRecord[];
}

export interface AllocatorSetting {
  name: string;
  value: unknown;
  /** The value as `%gpumem status` prints it ("off", "not set"); absent from older kernels. */
  shown?: string;
  source: string;
  /** Set once JAX has started where the setting's variable changed since: not in effect. */
  changed_after_start?: LateSettingChange | null;
}

/** A variable JAX read at its start, changed since (the kernel's started_with.LateChange). */
export interface LateSettingChange {
  name: string;
  variable: string;
  now: string | null;
  then: string | null;
  in_effect: string;
  asked: string;
  cell: number | null;
  exact: boolean;
}

/** JAX on the CPU while NVML sees GPUs, as the kernel words it. */
export interface CpuFallbackInfo {
  gpus: number;
  headline: string;
  sentence: string;
}

/** What the kernel pushes when its state may have changed. */
export interface KernelPush {
  type: 'event';
  event: 'loaded' | 'cell_end' | 'jax_started' | string;
  backend_started: boolean;
  t: number;
}

export interface JaxDeviceSnapshot {
  jax_id: number;
  nvml_index: number | null;
  allocator: string | null;
  bytes_in_use: number | null;
  pool_bytes: number | null;
  bytes_limit: number | null;
  peak_bytes_in_use: number | null;
  largest_free_block_bytes: number | null;
  fragmentation: number | null;
  /** Set when JAX keeps no statistics for this device (JAX on CPU); the numbers are null. */
  stats_reason?: string | null;
}

/** One row of the kernel's table of settings: which environment variable JAX reads for it. */
export interface SettingsTableRow {
  name: string;
  env_var: string;
}

export interface KernelSnapshot {
  type: 'snapshot';
  backend_started: boolean;
  platform: string | null;
  settings: AllocatorSetting[];
  warnings: string[];
  devices: JaxDeviceSnapshot[];
  reason: string | null;
  /** The allocator names the kernel's JAX accepts; null when unknown, absent from older kernels. */
  allocator_choices?: string[] | null;
  /** Absent from older kernels. */
  settings_table?: SettingsTableRow[];
  /** Absent from older kernels. */
  cpu_fallback?: CpuFallbackInfo | null;
}

/** The per-notebook allocator settings kept in metadata.jupyter_gpumem. */
export interface NotebookAllocatorSettings {
  preallocate: boolean | null;
  fraction: number | null;
  allocator: string | null;
}

/** A kernel's answer to an execute request that failed. */
export interface ExecutionError {
  ename: string;
  evalue: string;
}

export type Units = 'binary' | 'decimal';

export interface PanelOptions {
  pollSeconds: number;
  units: Units;
}
