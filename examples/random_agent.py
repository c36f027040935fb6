"""A training loop's skeleton over renderd: N players at once through Gymnasium, random actions.

    pip install '.[gym]'                                  # in renderd's checkout: the gym extra
    python examples/random_agent.py                       # 4 reference players, 2000 steps
    python examples/random_agent.py --envs 8 --steps 5000 --width 128 --height 128
    python examples/random_agent.py --environment demo    # lease from a running `renderd start`: as many
                                                          # players as the environment keeps (--envs: fewer)
    python examples/random_agent.py --executable /path/to/thor-build --scenes FloorPlan1,FloorPlan2

Replace the random policy with your agent: ``observations["rgb"]`` is an ``(N, H, W, 3) uint8`` batch.
A player that crashes is replaced; its episode ends (``truncated``) with the error in ``infos["error"]``,
and the loop goes on.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import gymnasium
import numpy as np

import renderd.gym  # noqa: F401  (registers renderd/Unity-v0)
from renderd import ConfigError, RenderdError
from renderd.daemon.client import ControlClient


def success_reward(event) -> float:
    """An example reward: small step cost, a penalty for bumping into things, a bonus near the fridge."""
    reward = -0.01 if event else -0.1
    for obj in event.metadata.get("objects") or ():
        if obj.get("objectType") == "Fridge" and obj.get("visible") and obj.get("distance", 9.0) < 1.0:
            reward += 1.0
    return reward


def reached_fridge(event) -> bool:
    return any(
        o.get("objectType") == "Fridge" and o.get("visible") and o.get("distance", 9.0) < 1.0
        for o in event.metadata.get("objects") or ()
    )


def leasable(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """How many players to lease: ``--envs``, by default as many as the environment keeps (its ``instances``).
    More than it keeps is refused at once: each slot too many would wait the lease timeout (30 s) for nothing."""
    try:
        environments = {e["name"]: e for e in ControlClient(args.socket).environments()}
    except RenderdError as exc:
        parser.error(str(exc))
    if args.environment not in environments:
        parser.error(f"the daemon has no environment named {args.environment!r} "
                     f"(it has: {', '.join(environments) or 'none'})")
    keeps = environments[args.environment]["config"]["instances"]
    envs = keeps if args.envs is None else args.envs
    if envs > keeps:
        parser.error(f"--envs {envs}: environment {args.environment!r} keeps {keeps} player(s) (its instances); "
                     "lease at most that many, or raise its instances")
    return envs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", type=int, help="players stepped together (default 4; with --environment, all it keeps)")
    p.add_argument("--steps", type=int, default=2000, help="vector steps to run (default 2000)")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--height", type=int, default=128)
    p.add_argument("--scenes", default="FloorPlan1,FloorPlan2,FloorPlan3", help="comma-separated scenes")
    p.add_argument("--max-episode-steps", type=int, default=200)
    p.add_argument("--depth", action="store_true", help="observe depth too")
    p.add_argument("--executable", default="renderd-player", help="the player to launch (a Unity build)")
    p.add_argument("--environment", help="lease players of this daemon environment instead of launching")
    p.add_argument("--socket", help="the daemon's control socket (default: $RENDERD_SOCKET, else renderd's default)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.envs is not None and args.envs < 1:
        p.error(f"--envs {args.envs}: give 1 or more players")
    if args.steps < 0:
        p.error(f"--steps {args.steps}: give 0 or more steps")
    if args.seed < 0:
        p.error(f"--seed {args.seed}: give an integer 0 or more (Gymnasium's and numpy's seeds are)")
    scenes = args.scenes.split(",")
    if not all(name.strip() for name in scenes):
        p.error(f"--scenes {args.scenes!r}: a scene name is empty (give names separated by commas, no spaces)")
    if args.environment:
        args.envs = leasable(p, args)
    elif args.envs is None:
        args.envs = 4
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    common = dict(
        num_envs=args.envs,
        scene=scenes,
        max_episode_steps=args.max_episode_steps,
        depth=args.depth,
        reward_fn=success_reward,
        terminated_fn=reached_fridge,
    )
    try:
        if args.environment:
            envs = gymnasium.make_vec("renderd/Unity-v0", environment=args.environment, socket=args.socket, **common)
        else:
            envs = gymnasium.make_vec(
                "renderd/Unity-v0", executable=args.executable, width=args.width, height=args.height, **common
            )
    except (ConfigError, ValueError) as exc:  # an argument the env refused (a missing --executable, --width 0)
        p.error(str(exc))
    rng = np.random.default_rng(args.seed)
    returns = np.zeros(args.envs)
    finished: list[float] = []
    crashes = 0
    try:
        try:
            observations, infos = envs.reset(seed=args.seed)
        except ValueError as exc:  # a scene the players do not have (--scenes)
            p.error(f"--scenes {args.scenes!r}: {exc}")
        started = time.perf_counter()
        for step in range(1, args.steps + 1):
            actions = rng.integers(0, envs.single_action_space.n, size=args.envs)  # your policy here
            _observations, rewards, terminated, truncated, infos = envs.step(actions)
            returns += rewards
            for i in np.flatnonzero(terminated | truncated):
                finished.append(float(returns[i]))
                returns[i] = 0.0
            if "_error" in infos:
                for i in np.flatnonzero(infos["_error"]):
                    crashes += 1
                    print(f"step {step}: env {i} lost its player ({infos['error_type'][i]}); replaced", file=sys.stderr)
            if step % 500 == 0:
                rate = step * args.envs / (time.perf_counter() - started)
                mean = np.mean(finished[-50:]) if finished else float("nan")
                print(f"step {step}: {rate:.0f} env steps/s, {len(finished)} episodes, mean return {mean:.2f}")
    finally:
        envs.close()
    print(f"done: {len(finished)} episodes, {crashes} player crashes survived")
    return 0


if __name__ == "__main__":
    sys.exit(main())
