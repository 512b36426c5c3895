import numpy as np
import numpy.typing as npt

def masked_greedy(pool: npt.NDArray[np.float32], order: npt.NDArray[np.int32], rows: npt.NDArray[np.int64],
                  bonus: npt.NDArray[np.int64], mask: npt.NDArray[np.int32], bonus_value: float,
                  out: npt.NDArray[np.int64], scan: int = 64) -> None: ...
def spin_until(deadline: float) -> None: ...
