use super::*;

fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn launchers_are_read_from_their_variables() {
    assert_eq!(Launch::from_vars(vars(&[])).unwrap(), None);
    let mpirun = Launch::from_vars(vars(&[("OMPI_COMM_WORLD_SIZE", "4")])).unwrap();
    assert_eq!(
        mpirun,
        Some(Launch {
            var: "OMPI_COMM_WORLD_SIZE",
            size: 4
        })
    );
    let hydra = Launch::from_vars(vars(&[("PMI_SIZE", "2")]))
        .unwrap()
        .unwrap();
    assert_eq!((hydra.var, hydra.size), ("PMI_SIZE", 2));
    let srun = Launch::from_vars(vars(&[
        ("SLURM_STEP_NUM_TASKS", "8"),
        ("SLURM_NTASKS", "16"),
    ]));
    assert_eq!(srun.unwrap().unwrap().size, 8);
    // A batch script has SLURM_NTASKS but is not a task of a step.
    assert_eq!(
        Launch::from_vars(vars(&[("SLURM_NTASKS", "16")])).unwrap(),
        None
    );
    let step = Launch::from_vars(vars(&[("SLURM_NTASKS", "3"), ("SLURM_STEP_ID", "0")]));
    assert_eq!(step.unwrap().unwrap().size, 3);
}

#[test]
fn a_bad_launcher_count_is_an_error_naming_the_variable() {
    for bad in ["0", "two", "-1", ""] {
        let e = Launch::from_vars(vars(&[("PMI_SIZE", bad)]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("PMI_SIZE") && e.contains(&format!("{bad:?}")),
            "{e}"
        );
    }
}

#[test]
fn one_process_is_a_world_of_one() {
    for launch in [
        None,
        Some(Launch {
            var: "PMI_SIZE",
            size: 1,
        }),
    ] {
        let w = World::join(launch).unwrap();
        assert_eq!(w.rank(), Rank::SINGLE);
        assert_eq!(world(), Rank::SINGLE);
        let mut g = vec![1.0f32, 2.0];
        all_reduce_sum(&mut g).unwrap();
        assert_eq!(g, [1.0, 2.0]);
        let mut b = vec![1u8, 2];
        broadcast(&mut b).unwrap();
        assert_eq!(b, [1, 2]);
        assert_eq!(gather(vec![3u8, 4]).unwrap(), vec![vec![3u8, 4]]);
        check_same("config", 7).unwrap();
    }
}

#[cfg(not(feature = "mpi"))]
#[test]
fn several_ranks_without_mpi_are_refused_naming_the_feature() {
    let launch = Launch {
        var: "OMPI_COMM_WORLD_SIZE",
        size: 2,
    };
    let e = World::join(Some(launch.clone())).err().unwrap();
    assert_eq!(
        e.downcast_ref::<RankError>(),
        Some(&RankError::NotBuilt(launch))
    );
    let msg = e.to_string();
    assert!(
        msg.contains("OMPI_COMM_WORLD_SIZE=2") && msg.contains("--features mpi"),
        "{msg}"
    );
}

#[test]
fn each_rank_on_a_machine_takes_its_own_gpu_unless_told_to_share() {
    use common::backend::TrainDevice::{Cpu, Cuda};
    let two = |rank| Rank { rank, size: 2 };
    // One rank, or the CPU: the config's device.
    assert_eq!(rank_device_from(Cuda(1), Rank::SINGLE, vars(&[])), Cuda(1));
    assert_eq!(
        rank_device_from(Cpu, two(1), vars(&[("OMPI_COMM_WORLD_LOCAL_RANK", "1")])),
        Cpu
    );
    // Local rank k: the k-th GPU from the one named, from any launcher's variable.
    let mpirun = vars(&[("OMPI_COMM_WORLD_LOCAL_RANK", "1")]);
    assert_eq!(rank_device_from(Cuda(0), two(1), mpirun), Cuda(1));
    let srun = vars(&[("SLURM_LOCALID", "3")]);
    assert_eq!(rank_device_from(Cuda(2), two(1), srun), Cuda(5));
    // Ranks on other machines count from 0 on theirs: rank 1 of 2 alone on its machine.
    let own = vars(&[("OMPI_COMM_WORLD_LOCAL_RANK", "0")]);
    assert_eq!(rank_device_from(Cuda(0), two(1), own), Cuda(0));
    // Sharing one GPU (a one-GPU machine testing a group).
    let share = vars(&[("OMPI_COMM_WORLD_LOCAL_RANK", "1"), (SHARE_GPU_VAR, "1")]);
    assert_eq!(rank_device_from(Cuda(0), two(1), share), Cuda(0));
}
