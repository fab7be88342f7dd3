/**
 * Browser tests in Debian's chromium. Four Jupyter servers: "live" (this machine as it is,
 * no GPU here), "replay" (a synthetic trace), "world" (the fake three-GPU NVML world through
 * the drop-in pynvml, for the server and every kernel it starts; synthetic) and "mesh" (the
 * fake 8 × H100 world, dgx_h100, the same way). Specs named *.replay.spec.ts run against the
 * replay server, *.world.spec.ts against the world server, *.mesh.spec.ts against the mesh
 * server, every other spec against the live one.
 */
const path = require('path');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const LIVE_PORT = Number(process.env.GPUMEM_UI_PORT || 8898);
const REPLAY_PORT = LIVE_PORT + 1;
const WORLD_PORT = LIVE_PORT + 2;
const MESH_PORT = LIVE_PORT + 3;
const CHROMIUM = process.env.GPUMEM_CHROMIUM || '/usr/bin/chromium';

const DROPIN_DIR = path.join(__dirname, '..', 'jupyter_gpumem', 'testing', 'pynvml_dropin');
const worldEnv = world =>
  world
    ? `PYTHONPATH=${DROPIN_DIR}${process.env.PYTHONPATH ? ':' + process.env.PYTHONPATH : ''} JUPYTER_GPUMEM_FAKE_NVML=${world} `
    : '';

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
  workers: 1,
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
      use: { baseURL: `http://localhost:${LIVE_PORT}` }
    },
    {
      name: 'replay',
      testMatch: /.*\.replay\.spec\.ts/,
      use: { baseURL: `http://localhost:${REPLAY_PORT}` }
    },
    {
      name: 'world',
      testMatch: /.*\.world\.spec\.ts/,
      use: { baseURL: `http://localhost:${WORLD_PORT}` }
    },
    {
      name: 'mesh',
      testMatch: /.*\.mesh\.spec\.ts/,
      use: { baseURL: `http://localhost:${MESH_PORT}` }
    }
  ],
  webServer: [server(LIVE_PORT, ''), server(REPLAY_PORT, 'demo'), server(WORLD_PORT, '', 'three_gpus'),
    server(MESH_PORT, '', 'dgx_h100')
  ]
};
