/**
 * Browser tests in Debian's chromium. Five Jupyter servers: "live" (this machine as it is,
 * no GPU here), "replay" (a synthetic trace), "world" and "world-jax" (each its own copy of the
 * fake three-GPU NVML world through the drop-in pynvml, for the server and every kernel it starts;
 * synthetic) and "mesh" (the fake 8 × H100 world, dgx_h100, the same way). Specs named
 * *.replay.spec.ts run against the replay server, *.mesh.spec.ts against the mesh server, the
 * world specs whose notebooks run JAX programs (WORLD_JAX) against world-jax, the other
 * *.world.spec.ts against world, every other spec against the live one.
 *
 * Two workers, one per server at a time: tests of one server never overlap (a spec may count the
 * kernels its server runs or change its world), while two servers' tests run side by side, since
 * most of a test's time is spent waiting on its page and kernel.
 */
const path = require('path');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const LIVE_PORT = Number(process.env.GPUMEM_UI_PORT || 8898);
const REPLAY_PORT = LIVE_PORT + 1;
const WORLD_PORT = LIVE_PORT + 2;
const MESH_PORT = LIVE_PORT + 3;
const WORLD_JAX_PORT = LIVE_PORT + 4;
const CHROMIUM = process.env.GPUMEM_CHROMIUM || '/usr/bin/chromium';

const DROPIN_DIR = path.join(__dirname, '..', 'jupyter_gpumem', 'testing', 'pynvml_dropin');
const worldEnv = world =>
  world
    ? `PYTHONPATH=${DROPIN_DIR}${process.env.PYTHONPATH ? ':' + process.env.PYTHONPATH : ''} JUPYTER_GPUMEM_FAKE_NVML=${world} `
    : '';

// The world specs whose notebooks run JAX programs: the monitor's, the arrays map's and the OOM
// report's (their kernels start JAX; the other world specs' kernels mostly wait on the panel).
const WORLD_JAX = [/monitor\.world\.spec\.ts/, /arraysMap\.world\.spec\.ts/, /oomPeak\.world\.spec\.ts/];

const server = (port, replay, world = '') => ({
  command: `${worldEnv(world)}GPUMEM_UI_PORT=${port} GPUMEM_UI_REPLAY=${replay} jupyter lab --config jupyter_server_test_config.py`,
  url: `http://localhost:${port}/lab`,
  timeout: 120 * 1000,
  reuseExistingServer: false,
  stdout: 'ignore',
  stderr: 'pipe'
});

module.exports = {
  ...baseConfig,
  reporter: [['list'], ['html', { open: 'never' }]],
  workers: 2,
  retries: 0,
  outputDir: 'test-results',
  use: {
    ...baseConfig.use,
    launchOptions: {
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-dev-shm-usage',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        '--disable-quic'
      ]
    },
    video: 'off',
    trace: 'off'
  },
  projects: [
    {
      name: 'live',
      testIgnore: [/.*\.replay\.spec\.ts/, /.*\.world\.spec\.ts/, /.*\.mesh\.spec\.ts/],
      workers: 1,
      use: { baseURL: `http://localhost:${LIVE_PORT}` }
    },
    {
      name: 'replay',
      testMatch: /.*\.replay\.spec\.ts/,
      workers: 1,
      use: { baseURL: `http://localhost:${REPLAY_PORT}` }
    },
    {
      name: 'world',
      testMatch: /.*\.world\.spec\.ts/,
      testIgnore: WORLD_JAX,
      workers: 1,
      use: { baseURL: `http://localhost:${WORLD_PORT}` }
    },
    {
      name: 'world-jax',
      testMatch: WORLD_JAX,
      workers: 1,
      use: { baseURL: `http://localhost:${WORLD_JAX_PORT}` }
    },
    {
      name: 'mesh',
      testMatch: /.*\.mesh\.spec\.ts/,
      workers: 1,
      use: { baseURL: `http://localhost:${MESH_PORT}` }
    }
  ],
  webServer: [server(LIVE_PORT, ''), server(REPLAY_PORT, 'demo'), server(WORLD_PORT, '', 'three_gpus'),
    server(MESH_PORT, '', 'dgx_h100'), server(WORLD_JAX_PORT, '', 'three_gpus')
  ]
};
