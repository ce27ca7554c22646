"""Every setting of ga3c, as UPPER_CASE class attributes: the file a user edits.

The first 45 settings are the original GA3C's, with its defaults, in its sections. Settings the original lacked
are marked "(new)". Values are overridden, later ones winning, by `--config FILE.toml` and by `KEY=VALUE`
arguments (see `ga3c/settings.py`), and every value is checked before anything starts.
"""


class Config:
    #########################################################################
    # Game configuration

    # Name of the game: any gymnasium id. The original's ids (PongDeterministic-v0, BreakoutDeterministic-v4, ...)
    # map to today's ALE/<Game>-v5 with frameskip 4 and no sticky actions.
    ATARI_GAME = 'PongDeterministic-v0'

    # Enable to see the trained agent in action (greedy actions, one agent, no training, no saving)
    PLAY_MODE = False
    # Enable to train
    TRAIN_MODELS = True
    # Load the latest (or LOAD_EPISODE's) checkpoint and resume from it
    LOAD_CHECKPOINT = False
    # Episode of the checkpoint to load; 0 = the latest one
    LOAD_EPISODE = 0
    # (new) Emulator frames per agent step, for ALE games (the original's "Deterministic" ids meant 4)
    FRAMESKIP = 4
    # (new) Sticky-action probability for ALE games (0 = deterministic, as the original's ids; ALE v5 uses 0.25)
    REPEAT_ACTION_PROBABILITY = 0.0
    # (new) Seed of every environment and of the model's initialisation; agent i's envs use SEED + offsets
    SEED = 0

    #########################################################################
    # Number of agents, predictors, trainers and other system settings

    # If the dynamic configuration is on, these are the initial values.
    # Number of agent processes
    AGENTS = 32
    # Number of predictor threads
    PREDICTORS = 2
    # Number of trainer threads
    TRAINERS = 2

    # Device for the model: 'gpu:0'/'cpu:0' (the original's form) or torch's 'cuda:0'/'cpu'; no GPU -> CPU
    DEVICE = 'gpu:0'

    # Enable the dynamic adjustment of trainers, predictors and agents (hill-climbing on trained samples/s)
    DYNAMIC_SETTINGS = True
    # Seconds each dynamic-adjustment window measures
    DYNAMIC_SETTINGS_STEP_WAIT = 20
    # Seconds before the dynamic adjustment starts
    DYNAMIC_SETTINGS_INITIAL_WAIT = 10
    # (new) A change is kept only if two windows in a row beat the current setting by more than this fraction
    # (0 = the original: one window with any gain keeps it; a window varies by ~10%, so counts walk at random)
    DYNAMIC_SETTINGS_MARGIN = 0.1
    # (new) After each change it undoes, the adjustment measures the setting it went back to over twice as many
    # windows as the last time, up to this many, before the next trial (1 = the original: one window, then the next
    # trial; more: once the counts have settled, fewer windows spent on worse trial settings)
    DYNAMIC_SETTINGS_HOLD_MAX = 1

    # (new) Environments stepped by each agent process; its states travel to the predictors together
    ENVS_PER_AGENT = 1
    # (new) Upper bound on agent processes (shared memory is sized for it; dynamic adjustment stays below it)
    MAX_AGENTS = 128
    # (new) Upper bound on predictor and on trainer threads for the dynamic adjustment
    MAX_PREDICTORS = 8
    MAX_TRAINERS = 8
    # (new) Threads torch may use for one operation in the main process; 0 = auto (1 on a CPU, where the
    # predictor and trainer threads share the cores with the agents; torch's default on a GPU)
    TORCH_THREADS = 0
    # (new) Arithmetic of the model: 'fp32' (faithful), 'bf16' (autocast: faster where the hardware has bfloat16,
    # AVX512-BF16 or AMX CPUs and Ampere+ GPUs; emulated and several times slower elsewhere) or 'auto' (bf16 where
    # it is native, fp32 elsewhere)
    PRECISION = 'fp32'
    # (new) Seconds between the main process's calls to glibc's malloc_trim, which give the free pages its heaps
    # keep back to the system (the heaps never trim themselves, to spare every training step page faults; a long
    # run's main process otherwise grows with fragmentation); 0 = never
    TRIM_SECONDS = 60
    # (new) glibc heaps (arenas) the main process's threads share. One heap: every thread reuses the others' freed
    # blocks (a 2-hour soak: +4.1% from minute 10 to 120, against +10.0% with 4 heaps, the same steps/s); more
    # heaps mean less waiting on a heap's lock and more free memory kept apart in each (docs/results/soak-cpu.md)
    MALLOC_ARENAS = 1

    #########################################################################
    # Algorithm parameters

    # Discount factor
    DISCOUNT = 0.99

    # Tmax: steps of experience an agent gathers before it sends them to the trainers
    TIME_MAX = 5

    # Reward clipping
    REWARD_MIN = -1.0
    REWARD_MAX = 1.0

    # Max size of the queue
    MAX_QUEUE_SIZE = 100
    # Largest batch a predictor serves at once
    PREDICTION_BATCH_SIZE = 128

    # Input of the DNN
    STACKED_FRAMES = 4
    IMAGE_WIDTH = 84
    IMAGE_HEIGHT = 84
    # (new) Resize of Atari frames: 'linear' (OpenCV's INTER_LINEAR: 2x2 source pixels per output pixel, no
    # smoothing when shrinking; fast), 'area' (OpenCV's INTER_AREA: a box average) or 'pillow' (Pillow's BILINEAR,
    # which the original's scipy.misc.imresize(..., 'bilinear') ran: a triangle filter widened by the shrink factor)
    RESIZE_INTERPOLATION = 'linear'
    # (new) Stretch every frame to 0..255 by its own minimum and maximum gray level before the resize, as the
    # original's scipy.misc.imresize did (the gray then computed from the RGB screen in floating point, as the
    # original). Off by default: a pixel's value would then depend on the rest of the screen
    FRAME_RESCALE = False
    # (new) Episode start: 'repeat' (the reset frame fills the stack; the agent acts from the first step) or 'noop'
    # (the original: STACKED_FRAMES-1 no-op steps, at least 1, fill it, not predicted, trained on, scored or
    # counted). 'repeat' by default: ga3c's recorded runs used it
    EPISODE_START = 'repeat'

    # Total number of episodes and annealing frequency
    EPISODES = 400000
    ANNEALING_EPISODE_COUNT = 400000
    # (new) When > 0, the learning rate and beta anneal over this many agent steps instead of over
    # ANNEALING_EPISODE_COUNT episodes: a schedule that means the same on every game (A2C's and PPO's linear
    # schedules count steps). 0 = the original's episode count
    ANNEALING_STEP_COUNT = 0
    # (new) Stop after this many agent steps (0 = no limit)
    MAX_STEPS = 0
    # (new) Stop after this many seconds of training (0 = no limit)
    MAX_SECONDS = 0

    # Entropy regularization hyper-parameter
    BETA_START = 0.01
    BETA_END = 0.01

    # Learning rate
    LEARNING_RATE_START = 0.0003
    LEARNING_RATE_END = 0.0003

    # RMSProp parameters (TensorFlow's RMSProp: epsilon inside the square root, mean square starting at 1)
    RMSPROP_DECAY = 0.99
    RMSPROP_MOMENTUM = 0.0
    RMSPROP_EPSILON = 0.1

    # Dual RMSProp: one optimizer for the policy loss and one for the value loss, instead of one on their sum
    DUAL_RMSPROP = False

    # Gradient clipping by the global norm of all gradients (the original clipped each tensor by its average norm)
    USE_GRAD_CLIP = False
    GRAD_CLIP_NORM = 40.0
    # Epsilon inside the log of the policy: log(pi + LOG_EPSILON), the paper's form (the original's code clamped:
    # log(max(pi, LOG_EPSILON)))
    LOG_EPSILON = 1e-6
    # Training starts once the gathered batch is larger than this
    TRAINING_MIN_BATCH_SIZE = 0

    # (new) Generalised advantage estimation's lambda (Schulman et al. 2016): the agents compute lambda-returns
    # (the value targets) and GAE advantages (the policy loss's) with the values they acted with; 1.0 = off, the
    # original's n-step returns with advantage R - V. Not with POLICY_LAG_CORRECTION='vtrace'
    GAE_LAMBDA = 1.0
    # (new) Normalise the advantages of each training batch, (A - mean) / (std + 1e-8), as the PPO and A2C of
    # OpenAI baselines, Stable-Baselines3 and CleanRL do
    NORMALIZE_ADVANTAGES = False
    # (new) Weight of the value loss 0.5 * sum((R - V)^2); 1.0 = the original's (the A3C paper's and
    # baselines' 0.5 * mean((R - V)^2) is 1.0 with LOSS_REDUCTION='mean')
    VALUE_LOSS_COEF = 1.0
    # (new) 'sum' (the original's: losses summed over the batch) or 'mean' (averaged, as most implementations
    # since: the step size then does not grow with the batch)
    LOSS_REDUCTION = 'sum'
    # (new) 'rmsprop_tf' (the original's TensorFlow RMSProp, above) or 'adam' (torch.optim.Adam, betas 0.9 and
    # 0.999, as PPO implementations use; not with DUAL_RMSPROP)
    OPTIMIZER = 'rmsprop_tf'
    # (new) Adam's epsilon with OPTIMIZER='adam' (CleanRL's PPO uses 1e-5; torch's default is 1e-8)
    ADAM_EPSILON = 1e-5
    # (new) 'original' (every weight and bias uniform in +-1/sqrt(fan_in), the original's) or 'orthogonal'
    # (orthogonal weights, zero biases: gain sqrt(2) in the body, 0.01 on the policy head, so that the first
    # policy is uniform, and 1 on the value head; the LSTM's weights gain 1; as OpenAI baselines, Stable-Baselines3
    # and CleanRL initialise)
    WEIGHT_INIT = 'original'
    # (new) Clip range of PPO's surrogate objective (Schulman et al. 2017), its ratio taken against the policy that
    # acted, as Sample Factory's asynchronous PPO: -sum(min(r * A, clip(r, 1 - c, 1 + c) * A)), r = pi(a) / mu(a);
    # it bounds how far one batch moves the policy, also from stale experience. 0 = off: the original's
    # -sum(log pi(a) * A). PPO uses 0.1-0.2
    PPO_CLIP = 0.0
    # (new) Optimizer steps on each training batch (PPO's epochs; the advantages stay those of the first); 1 = the
    # original's one step. More than 1 needs PPO_CLIP. Each step is an update (TPS, policy lag, MAX_POLICY_LAG)
    PPO_EPOCHS = 1

    # (new) Correction of the policy lag: 'none' (the faithful algorithm) or 'vtrace' (IMPALA)
    POLICY_LAG_CORRECTION = 'none'
    # (new) V-trace clipping thresholds (rho-bar and c-bar)
    VTRACE_RHO = 1.0
    VTRACE_C = 1.0
    # (new) Experience older than this many updates is dropped and counted (0 = keep all)
    MAX_POLICY_LAG = 0
    # (new) Width of the hidden layers of the MLP used for vector observations (CartPole, Acrobot, ...)
    MLP_HIDDEN_SIZE = 128
    # (new) Kind of network: 'feedforward' (the original's) or 'lstm' (A3C-LSTM: the same layers, then an LSTM
    # of LSTM_SIZE before the policy and value heads; the recurrent state of every environment lives in shared
    # memory beside its observation, and trainers unroll each rollout from the state it started from)
    NETWORK_TYPE = 'feedforward'
    # (new) Width of the LSTM's state (h and c) with NETWORK_TYPE='lstm'
    LSTM_SIZE = 256

    #########################################################################
    # Log and save

    # Enable TensorBoard
    TENSORBOARD = False
    # Update TensorBoard every X training steps
    TENSORBOARD_UPDATE_FREQUENCY = 1000

    # Enable to save models every SAVE_FREQUENCY episodes
    SAVE_MODELS = True
    # Save every SAVE_FREQUENCY episodes
    SAVE_FREQUENCY = 1000

    # Print stats every PRINT_STATS_FREQUENCY episodes
    PRINT_STATS_FREQUENCY = 1
    # The window to average stats
    STAT_ROLLING_MEAN_WINDOW = 1000

    # Results filename
    RESULTS_FILENAME = 'results.txt'
    # Network checkpoint name
    NETWORK_NAME = 'network'
    # (new) Folder of the checkpoints
    CHECKPOINT_DIR = 'checkpoints'
    # (new) Folder of the TensorBoard event files
    LOG_DIR = 'logs'

    #########################################################################
    # Play mode (new)

    # Episodes played by _play.sh
    PLAY_EPISODES = 5
    # Sample actions from the policy instead of taking the argmax
    PLAY_STOCHASTIC = False
    # Random number (0..N) of no-op actions at the start of each played episode
    PLAY_NOOP_MAX = 30
    # Record the played episodes to this MP4 file ('' = show a window when there is a display, else record to
    # play.mp4)
    VIDEO_PATH = ''

    #########################################################################
    # Cluster (new)

    # '' = every agent on this machine (the GA3C path); 'ray' = also agent groups on a Ray cluster (pip install
    # ga3c[ray]), each acting with a CPU copy of the policy and sending whole rollouts to the trainers here
    CLUSTER = ''
    # Ray address to connect to ('' = the RAY_ADDRESS environment variable if set, else a local Ray instance)
    RAY_ADDRESS = ''
    # Agent groups (Ray actors of one CPU each); 0 = one per CPU of the Ray cluster (start the head with
    # `ray start --head --num-cpus=0` so that the groups run on the other nodes and the head keeps its CPUs)
    CLUSTER_AGENT_GROUPS = 0
    # Upper bound on agent groups (set_groups and the dynamic adjustment stay below it)
    CLUSTER_MAX_AGENT_GROUPS = 64
    # Environments stepped by each agent group (a multiple of ENVS_PER_AGENT: a group rollout fills
    # CLUSTER_ENVS_PER_GROUP / ENVS_PER_AGENT experience slots)
    CLUSTER_ENVS_PER_GROUP = 8
    # The agent groups take fresh weights every this many training updates
    WEIGHT_SYNC_UPDATES = 10

    #########################################################################
    # More experimental parameters here

    # Minimum policy: mixes a uniform floor into the softmax
    MIN_POLICY = 0.0
    # Use log_softmax() instead of log(softmax())
    USE_LOG_SOFTMAX = False
