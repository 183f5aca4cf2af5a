/* An MPI all-reduce, as a training step's: every rank gives rank + 1, every rank prints the
 * sum. Built with Debian's mpicc into the MPI test image (tests/integration/test_mpi_pmix.py). */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank = 0, size = 0, mine, sum = 0;
	char host[256] = "";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	mine = rank + 1;
	MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	gethostname(host, sizeof(host) - 1);
	printf("rank %d/%d on %s: allreduce %d\n", rank, size, host, sum);
	MPI_Finalize();
	return 0;
}
